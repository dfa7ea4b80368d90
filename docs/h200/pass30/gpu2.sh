#!/usr/bin/env bash
# Pass 30, r2 (one call, after r1 found best_tiles' rows a program at 3 / 5 / 6 / 7 rows,
# not a power of 2, refused by Triton's compiler at 768-2047 tokens, k < 24; now rounded
# down): r1's GPU tests again (the top-k's invariance across N and the thresholds, finalize
# in the last launch, the stage against torch, best tiles by selection / extraction,
# merge_runs' two forms at 256 tokens); then r1's one-run table at the shape it did not
# reach (32768, 4096, 151936) while the call has time. OUT packed.
#   [LIMIT=570] bash docs/h200/pass30/gpu2.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; LIMIT=${LIMIT:-570}
. docs/h200/prologue.sh "$2" r2 docs/h200/pass30
PYTHONPATH=$PWD timeout $(left 230) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_batch_invariance_gpu.py tests/ops/test_triton_distill_gpu.py \
  -k "topk_same_bits or (topk_is_invariant and bf16 and not logits) or finalizes_in or (topk_stage_matches and dtype0) or best_tiles_selection or (merge_runs_matches and 256)" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="32768,4096,151936" timeout $(left 5) bash tools/device.sh distill "$WHL" "$R" \
  > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; tail -30 "$R/distill.log"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
