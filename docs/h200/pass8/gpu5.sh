#!/usr/bin/env bash
# Pass 8, fifth device call (r5): the recompute kernel's tile order (bwd_probe3.py).
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0
timeout 250 python3 docs/h200/pass8/bwd_probe3.py "$OUT/bwd3.json" 2>&1 | grep -v -i warn |
  tee "$OUT/bwd3_log.txt"
