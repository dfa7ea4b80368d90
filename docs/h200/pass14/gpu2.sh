#!/usr/bin/env bash
# Pass 14, second call (~4 min): the tree with the new split policy and the second maxima
# from k = 8 in small launches: where they should stop, the shapes, a kernel
# profile at 16384 tokens (topk_threshold.py).
#   bash docs/h200/pass14/gpu2.sh OUT      (from the repo root; no wheels needed)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools docs/h200/pass14 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > "$OUT/machine.txt" 2>&1
timeout 400 python3 docs/h200/pass14/topk_threshold.py "$OUT/topk_threshold.json" 2>&1 |
  tee "$OUT/topk_threshold.txt" | grep -vE "Warning|warn"
