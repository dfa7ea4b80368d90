set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv > "$OUT/machine.txt"
timeout 130 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_batch_invariance_gpu.py \
  -k "precision or topk" 2>&1 | tee "$OUT/pytest.txt" | tail -4
timeout 250 python3 -m tools.bench distill --sync --rounds 2 --ks 1,8,32 --methods topk_ours --phases fwd \
  --baseline .scratch/base77 --out "$OUT/distill" 2>&1 | tee "$OUT/distill.log" | grep -E "k=|gemm|Error" | tail -24
