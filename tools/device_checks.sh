#!/usr/bin/env bash
# The GPU tests and the baseline comparison, in one device call (docs/BENCHMARKS.md).
#   tools/device_checks.sh WHEEL_DIR BASELINE_DIR OUT_DIR
# WHEEL_DIR holds megatron_core-0.19.2-*.whl (the model capture test imports it);
# BASELINE_DIR holds megatron_overlay_base, a copy of the package to compare against.
set -uo pipefail
WHL=$1; BASE=$2; OUT=$3
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$WHL"/megatron_core-0.19.2-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv \
    | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' \
    | tee -a "$OUT/gpu.txt"
CUDA_VISIBLE_DEVICES=${GPUS:-0,1} python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
    tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py \
    tests/ops/test_triton_gpu.py 2>&1 | tee "$OUT/pytest.txt" | tail -25
CUDA_VISIBLE_DEVICES=0 python3 tools/bench_vs_baseline.py --baseline "$BASE" \
    --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tail -12
