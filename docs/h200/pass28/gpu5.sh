#!/usr/bin/env bash
# Pass 28, r7 (one call): at_grad_ab.py (at ids' and the top-k's d_hidden in the hidden
# states' dtype from the stage, against 0026e3f's fp32 d_hidden and cast: accuracy against
# fp64, peak memory at 8192 tokens, time at 256); then the GPU tests of those ops'
# backward, to the call's limit. BASE holds 0026e3f's package. OUT packed.
#   [LIMIT=330] bash docs/h200/pass28/gpu5.sh BASE OUT      (from the repo root)
set -u
BASE=$1; LIMIT=${LIMIT:-330}
. docs/h200/prologue.sh "$2" r7 docs/h200/pass28
PYTHONPATH=$PWD:$BASE timeout $(left 120) python3 docs/h200/pass28/at_grad_ab.py "$R/at_grad_ab.json" \
  > "$R/at_grad_ab.log" 2>&1
echo "at_grad_ab rc=$? at ${SECONDS}s"; grep -E "Error|^accuracy|^memory|^time" "$R/at_grad_ab.log"
PYTHONPATH=$PWD timeout $(left 10) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_triton_gpu.py tests/ops/test_cuda_graphs.py \
  -k "ops_match or expanded or at_ids_bad_ids or one_gradient" > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r7.tgz" r7 && rm -rf "$R"
