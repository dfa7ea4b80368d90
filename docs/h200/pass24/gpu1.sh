#!/usr/bin/env bash
# Pass 24, r1 (one call): direct_ab.py (direct launches off / on in one process: the same
# bits, host time, cProfile), then the one-GPU tests (tools/device.sh suite; SUITE_A_K
# selects a part of the batch-invariance file, PART_TIMEOUT each part). OUT packed.
#   bash docs/h200/pass24/gpu1.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; R=$OUT/r1; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass24 -name '*.py' | sort |
  xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
PYTHONPATH=$PWD timeout "${AB_TIMEOUT:-240}" python3 docs/h200/pass24/direct_ab.py "$R/direct_ab.json" \
  > "$R/direct_ab.log" 2>&1
echo "direct_ab rc=$? at ${SECONDS}s"; grep -E "^(bits.*DIFFER|plans|host|triton)" "$R/direct_ab.log"
grep -c "same$" "$R/direct_ab.log"
SUITE_A_K=${SUITE_A_K-"at_ids or same_bits_whatever"} PART_TIMEOUT=${PART_TIMEOUT:-300} \
  bash tools/device.sh suite "$WHL" "$R/suite"
echo "done at ${SECONDS}s"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
