set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
timeout 130 python3 .scratch/p4/probe3.py .scratch/base619 > "$OUT/probe3.txt" 2>&1; grep -A6 "== N" "$OUT/probe3.txt"
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py \
  tests/ops/test_cuda_graphs.py tests/ops/test_launch.py 2>&1 | tee "$OUT/pytest.txt" | tail -4
timeout 30 python3 -m pytest -q -p no:cacheprovider tests/ops/test_launch.py 2>&1 | tail -2
