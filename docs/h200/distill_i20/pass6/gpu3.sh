#!/usr/bin/env bash
# Pass 6, third device call: the tiles' second maxima (a chosen tile holding one logit >=
# thr is not recomputed) against fb65a4d (.scratch/base2/megatron_overlay_base): the top-k
# GPU tests, kernel profiles with the second maxima on and off (SECOND_MAX_MIN_K), then
# `bench distill` of top-k at k = 8 and 32, both protocols, with the baseline beside it.
set -u
OUT=$1; mkdir -p "$OUT"
SECONDS=0
D=docs/h200/distill_i20/pass6
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD:$PWD/.scratch/base2 TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  echo "package tree: $(git ls-files -s megatron_overlay 2>/dev/null | wc -l) files;" \
    "sha1 of its sources: $(find megatron_overlay -name '*.py' | sort | xargs cat | sha1sum)"
} > "$OUT/machine.txt" 2>&1
timeout 300 python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_batch_invariance_gpu.py \
  tests/ops/test_cuda_graphs.py -k "topk or tile_sort or ops_match" > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -5 "$OUT/pytest.txt"
echo "tests done at $SECONDS s"
for second in 2 1000000; do
  SECOND_MAX_MIN_K=$second timeout 50 python3 $D/prof_topk.py megatron_overlay \
    256,8 8192,8 8192,32 32768,32
done 2>&1 | tee "$OUT/prof.txt" | grep -v "^  .*aten\|Memcpy\|Memset\|UserWarn\|_warn_once"
echo "profiles done at $SECONDS s"
left=$((565 - SECONDS))
timeout $left python3 -m tools.bench distill --sync --rounds 3 --ks 8,32 \
  --shapes 256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936 \
  --methods topk_ours --baseline .scratch/base2 --out "$OUT/bench" 2>&1 |
  tee "$OUT/bench_log.txt" | grep -E "k=|gemm|done" | tail -40
echo "all done at $SECONDS s"
