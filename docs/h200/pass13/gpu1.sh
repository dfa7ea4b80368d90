#!/usr/bin/env bash
# Pass 13, first device call: every one-GPU `gpu` test and the demo on the tree as it
# stands, megatron-core 0.19.2 through the overlay's wheel and the pin (the README's
# cluster route, as `tools/device.sh verify`). The 153+ tests pass one call's 10 minutes
# one after another on a fresh H100 (pass 12: the first 66 in 420 s, most of it Triton
# compiling on one core), so pass 12's three parts run at once, one pytest each (16 host
# cores; the tests time nothing and fit the GPU's memory together).
#   bash docs/h200/pass13/gpu1.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools tests -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton",
  triton.__version__, "gpus", torch.cuda.device_count())'; } > "$OUT/machine.txt" 2>&1
site=/tmp/site-overlay-wheel
{ PYTHONPATH=$PWD python3 -m megatron_overlay.cli wheel 0.19.2 \
    --from .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl --out /tmp/wheelhouse &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site \
    --find-links /tmp/wheelhouse "megatron-core==0.19.2" &&
  PYTHONPATH=$site:$PWD python3 -m megatron_overlay.cli status --site $site
  echo "status rc=$?"; } > "$OUT/status.txt" 2>&1
export PYTHONPATH=$site:$PWD
part() {  # NAME FILES...: one pytest, its log in OUT
  local name=$1; shift
  timeout 470 python3 -m pytest -q -p no:cacheprovider -rs -m gpu "$@" > "$OUT/pytest_$name.txt" 2>&1
  echo "part $name rc=$?" >> "$OUT/pytest_$name.txt"
}
part a tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py \
  tests/ops/test_head_precision.py &
part b tests/ops/test_triton_distill_gpu.py &
part c tests/ops/test_triton_gpu.py tests/core/test_multi_gpu.py &
wait
timeout 60 python3 -m megatron_overlay.cli demo --repeats 3 > "$OUT/demo.txt" 2>&1
tail -3 "$OUT/status.txt"
for p in a b c; do echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$OUT/pytest_$p.txt" | tail -12; done
tail -8 "$OUT/demo.txt"
