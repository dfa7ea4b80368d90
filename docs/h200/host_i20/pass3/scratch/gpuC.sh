set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
SAME_SHAPES=1 timeout 70 python3 .scratch/same_as_base.py 2>&1 | tee "$OUT/same_as_base.txt" | tail -3
timeout 75 python3 -m tools.bench distill --sync --rounds 1 --ks 32 --methods topk_ours --phases fwd \
  --baseline .scratch/basefc --shapes 32768,4096,151936 --out "$OUT/distill" 2>&1 \
  | tee "$OUT/distill.log" | grep -E "k=|gemm|Error" | tail -4
timeout 80 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_cuda_graphs.py \
  tests/ops/test_triton_distill_gpu.py -k "label or token_ids or tile_sort or topk_forward_captures" 2>&1 \
  | tee "$OUT/pytest.txt" | tail -4
