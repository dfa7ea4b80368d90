#!/usr/bin/env bash
# Pass 28, r2 (one call): host_ab.py (this pass's host-side changes against 0026e3f's
# package in one process: the same bits, a synchronized call, its host time and first
# launch, a burst's host time, the primitives); then the GPU tests the changes touch
# (the backward's stages, ops, gradients and CUDA graphs; the new expanded-gradient test),
# to the call's limit. BASE holds 0026e3f's package as megatron_overlay_base. OUT packed.
#   [LIMIT=400] bash docs/h200/pass28/gpu2.sh BASE OUT      (from the repo root)
set -u
BASE=$1
. docs/h200/prologue.sh "$2" r2 docs/h200/pass28
PYTHONPATH=$PWD:$BASE timeout $(left 150) python3 docs/h200/pass28/host_ab.py "$R/host_ab.json" \
  > "$R/host_ab.log" 2>&1
echo "host_ab rc=$? at ${SECONDS}s"; grep -E "DIFFER|Error|primitive|^time" "$R/host_ab.log"
echo "bits same: $(grep -c ': same$' "$R/host_ab.log")"
PYTHONPATH=$PWD timeout $(left 10) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_gpu.py tests/ops/test_cuda_graphs.py tests/ops/test_triton_distill_gpu.py \
  -k "expanded or one_gradient or bad_label_makes or direct_d_hidden or configs_change or op_matches or ops_match or backward_capture or no_host_sync or (stages_match and bfloat16)" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
