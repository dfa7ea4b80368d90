#!/usr/bin/env bash
# Pass 11, third device call (r3; ~5 device minutes left): gpu2.sh's top-k k = 32 run alone.
#   bash docs/h200/pass11/gpu3.sh OUT      (from the repo root; carry [".venv/wheelhouse"])
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
timeout 150 python3 -m tools.bench distill --sync --rounds 3 --sync-calls 24 --ks 32 \
  --methods topk_ours --shapes 8192,4096,151936 --out "$OUT/distill" 2>&1 |
  grep -E "k=|gemm|done|check" | tail -20
