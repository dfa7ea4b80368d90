#!/usr/bin/env bash
# Pass 30, r1 (one call): the committed tree of pass 29 as a whole on a GPU. First the GPU
# tests that hold pass 29's small-call rules to the bits (a row's top-k the same whatever
# N, 1-3000 rows across every threshold; the top-k's invariance in bf16; finalize in the
# last launch; the stage against torch in bf16; best tiles by selection / extraction;
# merge_runs' two forms at 256 tokens); then the one-run table of this tree
# (tools/device.sh distill, the README's command: the top-k, at ids and log-prob ops
# against the bare GEMM, bursts and synchronized calls, N = 256 and the three
# shapes); then pass 28's sync_timeline.py at 256 tokens while the call has time. OUT packed.
#   [LIMIT=570] bash docs/h200/pass30/gpu1.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; LIMIT=${LIMIT:-570}
. docs/h200/prologue.sh "$2" r1 docs/h200/pass28 docs/h200/pass30
PYTHONPATH=$PWD timeout $(left 330) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_batch_invariance_gpu.py tests/ops/test_triton_distill_gpu.py \
  -k "topk_same_bits or (topk_is_invariant and bf16 and not logits) or finalizes_in or (topk_stage_matches and dtype0) or best_tiles_selection or (merge_runs_matches and 256)" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  timeout $(left 40) bash tools/device.sh distill "$WHL" "$R" > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; tail -42 "$R/distill.log"
TL_OPS=gemm,logprob,topk1,topk8,topk32,at8 PYTHONPATH=$PWD timeout $(left 5) \
  python3 docs/h200/pass28/sync_timeline.py "$R/timeline.json" > "$R/timeline.log" 2>&1
echo "timeline rc=$? at ${SECONDS}s"; grep -v "^    " "$R/timeline.log" | head -30
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
