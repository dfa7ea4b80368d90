#!/usr/bin/env bash
# Pass 28, r4 (one call): host_ab.py again with the last change too (a gradient that one
# cuBLAS product writes whole is that product's own tensor: torch.mm without out=), all of
# this pass's changes against 0026e3f's package in one process; then the GPU tests of the
# backward's paths (stages, ops, one gradient, the direct d_hidden, configs, CUDA graphs,
# the expanded gradients, the precision modes' gradients), to the call's limit. OUT packed.
#   [LIMIT=400] bash docs/h200/pass28/gpu4.sh BASE OUT      (from the repo root)
set -u
BASE=$1
. docs/h200/prologue.sh "$2" r4 docs/h200/pass28
PYTHONPATH=$PWD:$BASE timeout $(left 150) python3 docs/h200/pass28/host_ab.py "$R/host_ab.json" \
  > "$R/host_ab.log" 2>&1
echo "host_ab rc=$? at ${SECONDS}s"; grep -E "DIFFER|Error|^time" "$R/host_ab.log"
echo "bits same: $(grep -c ': same$' "$R/host_ab.log")"
PYTHONPATH=$PWD timeout $(left 10) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_gpu.py tests/ops/test_cuda_graphs.py tests/ops/test_triton_distill_gpu.py \
  tests/ops/test_head_precision.py \
  -k "expanded or one_gradient or bad_label_makes or direct_d_hidden or configs_change or op_matches or ops_match or backward_capture or no_host_sync or (stages_match and bfloat16) or gradients_pass or modes_gradients" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r4.tgz" r4 && rm -rf "$R"
