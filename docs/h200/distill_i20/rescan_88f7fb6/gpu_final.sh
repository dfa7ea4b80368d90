set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv > "$OUT/machine.txt"
timeout 170 python3 -m tools.bench distill --sync --rounds 2 --ks 8,32 --methods topk_ours --phases fwd \
  --baseline .scratch/baseb6 --shapes 8192,4096,151936 32768,4096,151936 --out "$OUT/ab" 2>&1 \
  | tee "$OUT/ab.log" | grep -E "k=|gemm|Error" | tail -12
timeout 340 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_distill_gpu.py \
  tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py -k "not gptmodel" 2>&1 \
  | tee "$OUT/pytest.txt" | tail -15
