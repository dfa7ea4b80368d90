#!/usr/bin/env bash
# Pass 7, second device call: a single call's host time before its first kernel, by layer.
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
{ lscpu | grep -E "Model name|MHz"
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
timeout 300 python3 docs/h200/host_i20/pass7/prelaunch_probe.py 256 8192 2>&1 | tee "$OUT/probe.txt"
