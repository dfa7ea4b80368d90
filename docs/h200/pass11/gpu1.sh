#!/usr/bin/env bash
# Pass 11, first device call: where a call's host time goes now (host_probe.py), N = 256
# and 8192, every op of issue 20, forward and forward+backward; then the rescan's rows,
# warps and stages (rescan_sweep.py).
#   bash docs/h200/pass11/gpu1.sh OUT      (from the repo root; the device's $OUT)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  lscpu | grep -E "Model name"
  LC_ALL=C find megatron_overlay tools docs/h200/pass11 -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
timeout 200 python3 docs/h200/pass11/host_probe.py 256 8192 2>&1 | tee "$OUT/host_probe.txt" | tail -5
timeout 150 python3 docs/h200/pass11/rescan_sweep.py 2>&1 | tee "$OUT/rescan_sweep.txt" | tail -40
# the ops against the torch stages on the GPU (finalize's values, the backward's lo parts)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
PYTHONPATH=/tmp/site:$PWD timeout 130 python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
  tests/ops/test_triton_gpu.py tests/ops/test_triton_distill_gpu.py -k \
  "op_matches_torch_impl or ops_match_torch_impl or backward_configs or direct_d_hidden or one_gradient or bad_label" \
  > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -3 "$OUT/pytest.txt"
