#!/usr/bin/env bash
# Pass 19, third device call: the top-k's GPU tests on the tree with the exact second
# maxima from k = 16 up to 2048 rows (two pytest processes), then topk_host.py.
#   bash docs/h200/pass19/gpu3.sh OUT   (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass19 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv; lscpu | grep "Model name"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$OUT/machine.txt" 2>&1
part() {  # NAME FILES...: one pytest, its log in OUT
  local name=$1; shift
  timeout 280 python3 -m pytest -q -p no:cacheprovider -rs -m gpu "$@" > "$OUT/pytest_$name.txt" 2>&1
  echo "part $name rc=$?" >> "$OUT/pytest_$name.txt"
}
part a tests/ops/test_batch_invariance_gpu.py -k topk &
part b tests/ops/test_triton_distill_gpu.py &
wait
for p in a b; do echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$OUT/pytest_$p.txt" | tail -12; done
timeout 150 python3 docs/h200/pass19/topk_host.py "$OUT/topk_host.json" 2>&1 | grep -v Warn \
  | tee "$OUT/topk_host.txt" | cut -c1-900
