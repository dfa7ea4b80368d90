set -u
OUT=$1; mkdir -p "$OUT"
SECONDS=0
TESTS=0 ROUNDS=3 SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  timeout 360 bash tools/device.sh distill .venv/wheelhouse/upstream "$OUT/bench"
echo "bench took $SECONDS s"
left=$((555 - SECONDS))
PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache CUDA_VISIBLE_DEVICES=0 \
  timeout $left python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
  tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py tests/ops/test_launch.py \
  tests/ops/test_triton_distill_gpu.py 2>&1 | tee "$OUT/pytest.txt" | tail -8
