#!/usr/bin/env bash
# Pass 15, third device call (r3, ~3 min): host_small.py (fixed: the at-ids module) and
# small_n.py again, with the sort's 2048-key blocks (tile_sort.SORT_BLOCK), against r1's
# 4096.
#   bash docs/h200/pass15/gpu3.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
(LC_ALL=C find megatron_overlay tools docs/h200/pass15 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv; lscpu | grep "Model name"; } > "$OUT/machine.txt" 2>&1
timeout 150 python3 docs/h200/pass15/host_small.py "$OUT/host_small.json" 2>&1 | grep -v Warn | tee "$OUT/host_small.txt"
timeout 200 python3 docs/h200/pass15/small_n.py "$OUT/small_n.json" 2>&1 | grep -v Warn > "$OUT/small_n.txt"
cut -c1-700 "$OUT/small_n.txt"
