#!/usr/bin/env bash
# Pass 8, sixth device call (r6): the precision modes' GPU tests (bf16-rounded logits and
# fp16 through the 16-bit backward's new default; mixed operands' configs unchanged).
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0
(LC_ALL=C find megatron_overlay tests -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
timeout 280 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_head_precision.py \
  > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -4 "$OUT/pytest.txt"
