#!/usr/bin/env bash
# Pass 15, second device call (r2, ~3 min): the counting sort's block sizes
# (sort_sweep.py) and where a 256-token forward call's host time goes (host_small.py).
#   bash docs/h200/pass15/gpu2.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
(LC_ALL=C find megatron_overlay tools docs/h200/pass15 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv; lscpu | grep "Model name"; } > "$OUT/machine.txt" 2>&1
timeout 150 python3 docs/h200/pass15/host_small.py "$OUT/host_small.json" 2>&1 | grep -v Warn | tee "$OUT/host_small.txt"
timeout 240 python3 docs/h200/pass15/sort_sweep.py "$OUT/sort_sweep.json" 2>&1 | grep -v Warn > "$OUT/sort_sweep.txt"
cat "$OUT/sort_sweep.txt"
