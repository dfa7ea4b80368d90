#!/usr/bin/env bash
# Pass 6, fourth device call: the landed rule (second maxima from k = 32) under the top-k
# GPU tests, the new test that both paths give the same bits first.
set -u
OUT=$1; mkdir -p "$OUT"
SECONDS=0
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 LC_ALL=C
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  find megatron_overlay tests -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
  tests/ops/test_triton_distill_gpu.py::test_second_maxima_change_no_bit \
  tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py \
  tests/ops/test_triton_distill_gpu.py -k "topk or second_maxima or tile_sort" \
  > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -8 "$OUT/pytest.txt"
echo "all done at $SECONDS s"
