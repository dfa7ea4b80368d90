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
timeout 240 python3 docs/h200/pass11/host_probe.py 256 8192 2>&1 | tee "$OUT/host_probe.txt" | tail -5
timeout 170 python3 docs/h200/pass11/rescan_sweep.py 2>&1 | tee "$OUT/rescan_sweep.txt" | tail -40
