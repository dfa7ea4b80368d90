#!/usr/bin/env bash
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
timeout 150 python3 -m tools.bench distill --sync --rounds 3 --ks 8 --methods topk_ours,at_ours --phases fwd --out "$OUT/distill" 2>&1 | tee "$OUT/distill.log" | grep -E "k=|gemm" | tail -12
timeout 150 python3 -m tools.bench op --sync --phases fwd --methods gemm,ours --rounds 3 --no-grad-check \
  --shapes "256,4096,151936;8192,4096,151936;32768,4096,151936" --out "$OUT/op" 2>&1 | tee "$OUT/op.log" | grep -E "^\| [0-9]" | tail -8
