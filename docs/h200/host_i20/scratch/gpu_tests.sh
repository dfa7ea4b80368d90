#!/usr/bin/env bash
# one device call: the GPU tests of the ops this session touched
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
git log --oneline | head -1 > "$OUT/commit.txt"
timeout ${T:-540} python3 -m pytest -q -rs -p no:cacheprovider -m gpu --durations=12 \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_triton_gpu.py \
  tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py 2>&1 | tee "$OUT/pytest.txt" | tail -40
