#!/usr/bin/env bash
# Pass 6, first device call: the rescan by segments and the tiles' maxima (ef78ea1, eb8106f)
# against 85e040b (.scratch/basemain/megatron_overlay_base): top-k GPU tests, kernel
# profiles, then `bench distill` of top-k with the baseline beside it.
set -u
OUT=$1; mkdir -p "$OUT"
SECONDS=0
D=docs/h200/distill_i20/pass6
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD:$PWD/.scratch/basemain TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  git log --oneline -1 2>/dev/null; } > "$OUT/machine.txt" 2>&1
timeout 170 python3 -m pytest -q -x -rs -p no:cacheprovider -m gpu \
  tests/ops/test_triton_distill_gpu.py -k "topk or tile_sort or ops_match" \
  tests/ops/test_batch_invariance_gpu.py -k "topk" 2>&1 | tee "$OUT/pytest1.txt" | tail -4
echo "tests done at $SECONDS s"
for pkg in megatron_overlay megatron_overlay_base; do
  timeout 60 python3 $D/prof_topk.py $pkg 256,8 256,32 8192,8 8192,32
done 2>&1 | tee "$OUT/prof.txt" | grep -v "^  .*aten\|Memcpy\|Memset"
echo "profiles done at $SECONDS s"
left=$((560 - SECONDS))
timeout $left python3 -m tools.bench distill --sync --rounds 3 --ks 1,8,32 \
  --shapes 256,4096,151936 8192,4096,151936 32768,4096,151936 \
  --methods topk_ours --baseline .scratch/basemain --out "$OUT/bench" 2>&1 |
  tee "$OUT/bench_log.txt" | grep -E "k=|gemm|done" | tail -40
echo "all done at $SECONDS s"
