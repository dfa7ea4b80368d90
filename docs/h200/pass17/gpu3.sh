#!/usr/bin/env bash
# Pass 17, third device call: pass 15's host_small.py and small_n.py on this tree (the
# sort's one-block form in the top-k at 256 tokens; the host time by function), for the
# next pass's plan.
#   bash docs/h200/pass17/gpu3.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
(LC_ALL=C find megatron_overlay tools docs/h200/pass15 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv; lscpu | grep "Model name"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$OUT/machine.txt" 2>&1
timeout 150 python3 docs/h200/pass15/host_small.py "$OUT/host_small.json" 2>&1 | grep -v Warn > "$OUT/host_small.txt"
timeout 200 python3 docs/h200/pass15/small_n.py "$OUT/small_n.json" 2>&1 | grep -v Warn > "$OUT/small_n.txt"
cut -c1-600 "$OUT/host_small.txt"; cut -c1-600 "$OUT/small_n.txt"
