#!/usr/bin/env bash
# Pass 7, first device call: where a synchronized single call's time goes (sync_probe.py).
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  lscpu | grep -E "Model name|MHz"
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
timeout 400 python3 docs/h200/host_i20/pass7/sync_probe.py 256 8192 32768 2>&1 | tee "$OUT/probe.txt"
