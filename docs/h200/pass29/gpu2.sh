#!/usr/bin/env bash
# Pass 29, r2 (one call, after r1's picks became the defaults; not yet run): the GPU tests
# that hold the committed rules to the bits (the top-k's invariance across N and across
# the second-maxima thresholds in bf16, finalize in the last launch, the stage against
# torch in bf16, best tiles by selection / extraction, merge_runs' two forms at 256
# tokens), then sync_timeline.py at 256 tokens (pass 28's, the top-k ops and the GEMM:
# where a synchronized call's time goes now). OUT packed.
#   [LIMIT=300] bash docs/h200/pass29/gpu2.sh OUT      (from the repo root)
set -u
LIMIT=${LIMIT:-300}
. docs/h200/prologue.sh "$1" r2 docs/h200/pass28 docs/h200/pass29
PYTHONPATH=$PWD timeout $(left 100) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_batch_invariance_gpu.py \
  -k "topk_same_bits or (topk_is_invariant and bf16 and not logits) or finalizes_in or (topk_stage_matches and dtype0) or best_tiles_selection or (merge_runs_matches and 256)" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
TL_OPS=gemm,logprob,topk1,topk8,topk32,at8 PYTHONPATH=$PWD timeout $(left 8) \
  python3 docs/h200/pass28/sync_timeline.py "$R/timeline.json" > "$R/timeline.log" 2>&1
echo "timeline rc=$? at ${SECONDS}s"; grep -v "^    " "$R/timeline.log" | head -40
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
