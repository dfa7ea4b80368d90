#!/usr/bin/env bash
# Pass 14, first call (~6 min): the top-k at small N, variants and their bitwise equality
# (topk_small_n.py), then the top-k's vocab split counts at the shapes with a
# kernel profile at 8192 tokens (topk_splits.py), on the tree as it stands.
#   bash docs/h200/pass14/gpu1.sh OUT      (from the repo root; no wheels needed)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools docs/h200/pass14 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > "$OUT/machine.txt" 2>&1
timeout 280 python3 docs/h200/pass14/topk_splits.py "$OUT/topk_splits.json" 2>&1 |
  tee "$OUT/topk_splits.txt" | grep -vE "Warning|warn"
timeout 250 python3 docs/h200/pass14/topk_small_n.py "$OUT/topk_small_n.json" 2>&1 |
  tee "$OUT/topk_small_n.txt" | grep -vE "Warning|warn"
