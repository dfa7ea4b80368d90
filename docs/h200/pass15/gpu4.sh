#!/usr/bin/env bash
# Pass 15, fourth device call (r4): host_small.py and small_n.py on the final tree (the
# per-row temperatures' one launch, the sort's 2048-key blocks), then every one-GPU `gpu`
# test, pass 13's three parts as three pytest processes at once (its gpu1.sh without the
# demo: the call's 10 minutes).
#   bash docs/h200/pass15/gpu4.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass15 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv; lscpu | grep "Model name"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$OUT/machine.txt" 2>&1
PYTHONPATH=$PWD timeout 100 python3 docs/h200/pass15/host_small.py "$OUT/host_small.json" 2>&1 | grep -v Warn > "$OUT/host_small.txt"
PYTHONPATH=$PWD timeout 100 python3 docs/h200/pass15/small_n.py "$OUT/small_n.json" 2>&1 | grep -v Warn > "$OUT/small_n.txt"
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
  timeout 420 python3 -m pytest -q -p no:cacheprovider -rs -m gpu "$@" > "$OUT/pytest_$name.txt" 2>&1
  echo "part $name rc=$?" >> "$OUT/pytest_$name.txt"
}
part a tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py \
  tests/ops/test_head_precision.py &
part b tests/ops/test_triton_distill_gpu.py &
part c tests/ops/test_triton_gpu.py tests/core/test_multi_gpu.py &
wait
cat "$OUT/host_small.txt"; cut -c1-400 "$OUT/small_n.txt"
tail -2 "$OUT/status.txt"
for p in a b c; do echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$OUT/pytest_$p.txt" | tail -12; done
