#!/usr/bin/env bash
# Pass 20, second device call: every one-GPU `gpu` test on this tree, megatron-core 0.19.2
# through the overlay's wheel, in four pytest processes at once (pass 19's three, its
# batch-invariance file on its own: that process reached 330 s on a fresh machine).
#   bash docs/h200/pass20/gpu2.sh OUT   (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools tests -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv; lscpu | grep "Model name"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$OUT/machine.txt" 2>&1
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
  timeout "${PART_TIMEOUT:-500}" python3 -m pytest -q -p no:cacheprovider -rs -m gpu "$@" \
    > "$OUT/pytest_$name.txt" 2>&1
  echo "part $name rc=$?" >> "$OUT/pytest_$name.txt"
}
part a tests/ops/test_batch_invariance_gpu.py &
part b tests/ops/test_cuda_graphs.py tests/ops/test_head_precision.py &
part c tests/ops/test_triton_distill_gpu.py &
part d tests/ops/test_triton_gpu.py tests/core/test_multi_gpu.py &
wait
tail -2 "$OUT/status.txt"
for p in a b c d; do echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$OUT/pytest_$p.txt" | tail -12; done
