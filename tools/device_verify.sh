#!/usr/bin/env bash
# The merged tree's GPU checks in one device call, on a machine with 1 or 2 GPUs:
# megatron-core 0.19.2 installed through the overlay's wheel and the user's pin (the
# README's cluster route), then every GPU test (tests marked `gpu`: the Triton kernels,
# CUDA-graph capture, batch invariance, the distillation kernels, the 2-GPU TP/PP tests),
# then the demo on the GPU. Logs under OUT_DIR.
#   tools/device_verify.sh WHEEL_DIR OUT_DIR        # run from the repository root
set -u
WHL=$(cd "$1" && pwd); OUT=$2; mkdir -p "$OUT"
# NVLink multicast stays off (the machine's notes); keep it so in every child process
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
site=/tmp/site-overlay-wheel
{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__,
  "triton", triton.__version__)'; } 2>&1 | tee "$OUT/machine.txt"
PYTHONPATH=$PWD python3 -m megatron_overlay.cli wheel 0.19.2 \
  --from "$WHL"/megatron_core-0.19.2-*.whl --out /tmp/wheelhouse 2>&1 | tee "$OUT/wheel.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target $site \
  --find-links /tmp/wheelhouse megatron-core==0.19.2 2>&1 | tee -a "$OUT/wheel.txt"
export PYTHONPATH=$site:$PWD
python3 -m megatron_overlay.cli status --site $site 2>&1 | tee -a "$OUT/wheel.txt"
echo "status rc=${PIPESTATUS[0]}" | tee -a "$OUT/wheel.txt"
timeout "${PYTEST_TIMEOUT:-330}" python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops tests/core/test_multi_gpu.py 2>&1 | tee "$OUT/pytest.txt" | tail -25
timeout 100 python3 -m megatron_overlay.cli demo --repeats 3 2>&1 | tee "$OUT/demo.txt" | tail -12
