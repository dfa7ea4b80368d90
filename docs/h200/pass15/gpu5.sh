#!/usr/bin/env bash
# Pass 15, fifth device call (r5): host_small.py on the tree before the per-row
# temperatures' kernel (e4fe1c2's package, carried as .scratch/base15/megatron_overlay)
# and on this one, alternately, twice each, on one machine.
#   git archive e4fe1c2 megatron_overlay | tar -x -C .scratch/base15
#   bash docs/h200/pass15/gpu5.sh OUT      (from the repo root; carry .scratch/base15)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
{ nvidia-smi --query-gpu=index,name --format=csv; lscpu | grep "Model name"; } > "$OUT/machine.txt" 2>&1
for round in 1 2; do
  for tree in base new; do
    path=$PWD; [ $tree = base ] && path=$PWD/.scratch/base15:$PWD
    echo "== $tree round $round"
    PYTHONPATH=$path timeout 60 python3 docs/h200/pass15/host_small.py "$OUT/host_$tree$round.json" 2>&1 | grep -E "^logprob"
  done
done | tee "$OUT/host_ab.txt"
