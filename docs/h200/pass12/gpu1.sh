#!/usr/bin/env bash
# Pass 12, first device call(s): every `gpu` test and the demo on the tree as it stands
# (megatron-core 0.19.2 through the overlay's wheel and the pin: `tools/device.sh verify`).
# The 153 one-GPU tests passed one call's 10 minutes on a fresh H100 (2026-12-05: the
# first 66 in 420 s), so PART picks a third of them a call:
#   bash docs/h200/pass12/gpu1.sh OUT [PART]   (PART: a, b or c; from the repo root;
#                                               carry .venv/wheelhouse)
#   a: batch invariance, CUDA graphs, head precision, the demo   b: the distillation ops'
#   c: the Triton stages', and the 2-GPU ones where there are 2 GPUs
set -u
OUT=$1; PART=${2:-a}; mkdir -p "$OUT"
case $PART in
  a) export VERIFY_TESTS="tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py tests/ops/test_head_precision.py" DEMO=1 ;;
  b) export VERIFY_TESTS="tests/ops/test_triton_distill_gpu.py" DEMO=0 ;;
  c) export VERIFY_TESTS="tests/ops/test_triton_gpu.py tests/core/test_multi_gpu.py" DEMO=0 ;;
  *) echo "PART: a, b or c" >&2; exit 2 ;;
esac
(LC_ALL=C find megatron_overlay tools tests -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
PYTEST_TIMEOUT=480 timeout 560 bash tools/device.sh verify .venv/wheelhouse/upstream "$OUT"
