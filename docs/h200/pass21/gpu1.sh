#!/usr/bin/env bash
# Pass 21, r1: every op's host time, function by function (host_calls.py), at 256 and
# 32768 tokens; OUT packed as one tarball (the device tool returns a limited number of files).
#   bash docs/h200/pass21/gpu1.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT/r1"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
(LC_ALL=C find megatron_overlay tools docs/h200/pass21 -name '*.py' | sort |
  xargs sha1sum > "$OUT/r1/sources.txt")
{ lscpu | grep "Model name"; nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$OUT/r1/machine.txt" 2>&1
timeout 400 python3 docs/h200/pass21/host_calls.py "$OUT/r1" > "$OUT/r1/log.txt" 2>&1
echo "host_calls rc=$?" | tee -a "$OUT/r1/log.txt"
tail -5 "$OUT/r1/log.txt"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$OUT/r1"
