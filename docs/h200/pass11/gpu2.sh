#!/usr/bin/env bash
# Pass 11, second device call (r2; the device budget's last minutes): the top-k at k = 32 with
# the rescan's 64-row programs where the pairs are sparse (bench distill, both protocols,
# x the GEMM), then host_probe.py at N = 256 (r1's crashed on its own bug).
#   bash docs/h200/pass11/gpu2.sh OUT      (from the repo root; carry [".venv/wheelhouse"])
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools docs/h200/pass11 -name '*.py' | sort | xargs sha1sum \
  > "$OUT/sources.txt")
timeout 130 python3 -m tools.bench distill --sync --rounds 3 --sync-calls 24 --ks 32 \
  --methods topk_ours --shapes 8192,4096,151936 --out "$OUT/distill" 2>&1 |
  grep -E "k=|gemm|done" | tail -20
METHODS=gemm,logprob,logprob_fb,topk32 timeout 80 python3 docs/h200/pass11/host_probe.py 256 2>&1 | tee "$OUT/host_probe.txt" | tail -3
