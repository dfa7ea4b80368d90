#!/usr/bin/env bash
# Pass 7, seventh device call: clocks during single calls and bursts (clocks_probe.py).
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
python3 -c 'import pynvml' 2>/dev/null || echo "no pynvml: clocks will read nan"
timeout 200 python3 docs/h200/host_i20/pass7/clocks_probe.py 8192 16384 2>&1 | tee "$OUT/clocks.txt"
