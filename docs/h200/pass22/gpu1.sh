#!/usr/bin/env bash
# Pass 22, r1: small_ab.py on the tree before this pass (BASE: its megatron_overlay
# package's parent folder) and on this one, alternated twice in one machine; then the
# top-k's GPU tests (tests/ops/test_triton_distill_gpu.py) on this tree. OUT packed.
#   bash docs/h200/pass22/gpu1.sh BASE OUT      (from the repo root)
set -u
BASE=$(cd "$1" && pwd); OUT=$2; R=$OUT/r1; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools docs/h200/pass22 "$BASE" -name '*.py' | sort |
  xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$R/machine.txt" 2>&1
cat "$R/machine.txt"
for i in 1 2; do
  for tree in base new; do
    path=$PWD; [ $tree = base ] && path=$BASE:$PWD
    PYTHONPATH=$path timeout 170 python3 docs/h200/pass22/small_ab.py "$R/$tree$i.json" \
      > "$R/$tree$i.log" 2>&1
    echo "== $tree$i rc=$?"; cut -c1-110 "$R/$tree$i.log"
  done
done
PYTHONPATH=$PWD timeout 220 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py > "$R/pytest_distill.txt" 2>&1
echo "pytest rc=$?"; tail -6 "$R/pytest_distill.txt"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
