#!/usr/bin/env bash
# Pass 23, r2: docs/h200/pass22/small_ab.py on the tree before this pass (BASE: its
# megatron_overlay package's parent folder) and on this one, alternated twice in one
# machine (outputs' digests, GPU time by kernel, launches, host time). OUT packed.
#   bash docs/h200/pass23/gpu2.sh BASE OUT      (from the repo root)
set -u
BASE=$(cd "$1" && pwd); OUT=$2; R=$OUT/r2; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools docs/h200/pass22 docs/h200/pass23 "$BASE" -name '*.py' |
  sort | xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$R/machine.txt" 2>&1
cat "$R/machine.txt"
for i in 1 2; do
  for tree in base new; do
    path=$PWD; [ $tree = base ] && path=$BASE:$PWD
    PYTHONPATH=$path timeout 140 python3 docs/h200/pass22/small_ab.py "$R/$tree$i.json" \
      > "$R/$tree$i.log" 2>&1
    echo "== $tree$i rc=$?"; cut -c1-150 "$R/$tree$i.log"
  done
done
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
