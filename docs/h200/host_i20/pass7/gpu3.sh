#!/usr/bin/env bash
# Pass 7, third device call: cProfile of single synchronized calls (cprofile_probe.py).
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
timeout 200 python3 docs/h200/host_i20/pass7/cprofile_probe.py 256 logprob at8 topk8 2>&1 | tee "$OUT/cprofile.txt"
