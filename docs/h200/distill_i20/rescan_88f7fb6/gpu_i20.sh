#!/usr/bin/env bash
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv > "$OUT/machine.txt"
timeout 200 python3 .scratch/rescan_check.py 2>&1 | tee "$OUT/check.log" | tail -20
timeout ${BT:-330} python3 -m tools.bench distill --sync --rounds ${ROUNDS:-3} --ks ${KS:-1,8,32} \
  --methods topk_ours --phases fwd --baseline .scratch/base77 ${SHAPES:+--shapes $SHAPES} \
  --out "$OUT/distill" 2>&1 | tee "$OUT/distill.log" | grep -E "k=|gemm|done|Error|error" | tail -40
