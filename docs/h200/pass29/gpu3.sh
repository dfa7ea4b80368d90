#!/usr/bin/env bash
# Pass 29, r2 for a short budget (one call): the committed defaults' GPU tests that hold
# the new small-call rules to the bits (a row's top-k the same whatever N: 1-3000 rows
# cross every threshold; finalize in the last kernel's launch, now merge_topk's kernel
# at 256 tokens; the stage against torch in bf16). OUT packed.
#   [LIMIT=170] bash docs/h200/pass29/gpu3.sh OUT      (from the repo root)
set -u
LIMIT=${LIMIT:-170}
. docs/h200/prologue.sh "$1" r2 docs/h200/pass29
PYTHONPATH=$PWD timeout $(left 5) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_batch_invariance_gpu.py tests/ops/test_triton_distill_gpu.py \
  -k "topk_same_bits or finalizes_in or (topk_stage_matches and dtype0)" > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
