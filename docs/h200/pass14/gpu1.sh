#!/usr/bin/env bash
# Pass 14 (next device session), first call (~3 min): the top-k at small N, variants and
# their bitwise equality (topk_small_n.py), then the log-prob op's and the top-k's GPU tests
# a variant would touch, on the tree as it stands.
#   bash docs/h200/pass14/gpu1.sh OUT      (from the repo root; no wheels needed)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > "$OUT/machine.txt" 2>&1
timeout 400 python3 docs/h200/pass14/topk_small_n.py "$OUT/topk_small_n.json" 2>&1 |
  tee "$OUT/topk_small_n.txt" | grep -vE "Warning|warn"
