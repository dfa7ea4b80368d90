#!/usr/bin/env bash
# Pass 11, fourth device call (r4, on r3's machine while still warm, its Triton cache
# filled): host_probe.py at N = 256 for four methods.
#   bash docs/h200/pass11/gpu4.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache
METHODS=gemm,logprob,logprob_fb,topk32 timeout 100 python3 docs/h200/pass11/host_probe.py 256 \
  > "$OUT/host_probe.txt" 2>&1
tail -3 "$OUT/host_probe.txt"
