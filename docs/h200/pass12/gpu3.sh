#!/usr/bin/env bash
# Pass 12, third device call (~2 min): the host cost of each primitive of a call and of
# its alternatives (host_primitives.py), then where a call's host time goes (pass 11's
# host_probe.py at N = 256) on the same host, to choose the host-side changes.
#   bash docs/h200/pass12/gpu3.sh OUT      (from the repo root; no wheels needed)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
{ nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)|MHz"; } > "$OUT/machine.txt" 2>&1
timeout 200 python3 docs/h200/pass12/host_primitives.py "$OUT/host_primitives.json" 2>&1 |
  tee "$OUT/host_primitives.txt"
METHODS=gemm,logprob,logprob_fb,topk32 timeout 200 python3 docs/h200/pass11/host_probe.py 256 2>&1 |
  tee "$OUT/host_probe.txt" | grep -E "^--|us  x" | head -60
