set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
git log --oneline -1 >> "$OUT/machine.txt" 2>/dev/null; git status --short >> "$OUT/machine.txt" 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
timeout 560 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_distill_gpu.py \
  tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py tests/ops/test_triton_gpu.py 2>&1 \
  | tee "$OUT/pytest.txt" | tail -15
