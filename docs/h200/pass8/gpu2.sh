#!/usr/bin/env bash
# Pass 8, second device call: the recompute kernel's configs (row terms before the K loop,
# pointer stores, epilogue halves, the flattened loop) by kernel time and in the
# forward+backward against the floor (bwd_probe2), then the GPU test of their bits.
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
D=docs/h200/pass8
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
SECONDS=0
timeout 420 python3 $D/bwd_probe2.py "$OUT/bwd2.json" > "$OUT/bwd2_log.txt" 2>&1
echo "probe exit $? at $SECONDS s"; grep -v Warning "$OUT/bwd2_log.txt" | tail -40
left=$((560 - SECONDS))
timeout $left python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py \
  -k "change_no_bit" > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -5 "$OUT/pytest.txt"
echo "done at $SECONDS s"
