#!/usr/bin/env bash
# Pass 19, first device call: every one-GPU `gpu` test on this tree (three pytest
# processes at once, as pass 17's gpu1.sh), then exact_cells.py (the top-k's exact second
# maxima at the cells pass 18 did not time). The one-run table is the second call:
# `bash docs/h200/pass12/gpu2.sh OUT`.
#   bash docs/h200/pass19/gpu1.sh OUT   (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass18 docs/h200/pass19 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
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
  timeout 330 python3 -m pytest -q -p no:cacheprovider -rs -m gpu "$@" > "$OUT/pytest_$name.txt" 2>&1
  echo "part $name rc=$?" >> "$OUT/pytest_$name.txt"
}
part a tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py \
  tests/ops/test_head_precision.py &
part b tests/ops/test_triton_distill_gpu.py &
part c tests/ops/test_triton_gpu.py tests/core/test_multi_gpu.py &
wait
tail -2 "$OUT/status.txt"
for p in a b c; do echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$OUT/pytest_$p.txt" | tail -12; done
timeout 200 python3 docs/h200/pass19/exact_cells.py "$OUT/exact_cells.json" 2>&1 | grep -v Warn \
  | tee "$OUT/exact_cells.txt" | cut -c1-700
