#!/usr/bin/env bash
# one device call: both protocols of the distillation ops and the log-prob op
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
git log --oneline | head -1 > "$OUT/commit.txt"
timeout ${TD:-230} python3 -m tools.bench distill --sync --rounds ${ROUNDS:-3} --out "$OUT/distill" 2>&1 | tee "$OUT/distill.log" | grep -E "k=|gemm" | tail -40
timeout ${TO:-120} python3 -m tools.bench op --sync --methods gemm,ours --rounds ${ROUNDS:-3} --no-grad-check \
  --shapes "256,4096,151936;8192,4096,151936" --out "$OUT/op" 2>&1 | tee "$OUT/op.log" | tail -14
cd "$OUT" && tar -czf ../bench.tgz . && mv ../bench.tgz .
