#!/usr/bin/env bash
# Pass 8, third device call: the GPU tests with the new backward default (the flattened
# loop, the epilogue in halves): Triton stages, CUDA graphs, batch invariance, launches,
# the distillation ops' backward (ops_match, at_ids).
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
SECONDS=0
timeout 400 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py \
  tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py tests/ops/test_launch.py \
  > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -4 "$OUT/pytest.txt"
left=$((570 - SECONDS))
timeout $left python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
  tests/ops/test_triton_distill_gpu.py -k "ops_match or at_ids or sparse" > "$OUT/pytest_distill.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest_distill.txt"; tail -4 "$OUT/pytest_distill.txt"
echo "done at $SECONDS s"
