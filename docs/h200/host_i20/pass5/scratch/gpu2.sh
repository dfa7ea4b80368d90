set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
lscpu | grep -E "Model name|^CPU\(s\)" >> "$OUT/machine.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
git log --oneline -1 > "$OUT/commit.txt" 2>/dev/null
timeout 150 python3 .scratch/p5/probe6.py .scratch/baseda0 > "$OUT/probe6.txt" 2>&1; cat "$OUT/probe6.txt" | tail -12
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_batch_invariance_gpu.py \
  tests/ops/test_cuda_graphs.py tests/ops/test_launch.py 2>&1 | tee "$OUT/pytest.txt" | tail -8
