#!/usr/bin/env bash
# Pass 26, a short call for the budget left after refused starts: pass 25's tail_ab.py part 1
# (digests, CUDA time by kernel) for before / few / prefetch / prefetch_s4 at 256 and 1024
# tokens, then the GPU tests of the sort's lone block (SORT_FEW) while the call has time.
#   [LIMIT=220] bash docs/h200/pass26/gpu3.sh OUT      (from the repo root)
set -u
OUT=$1; R=$OUT/r1; mkdir -p "$R"; L=${LIMIT:-220}
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tests docs/h200/pass25 -name '*.py' | sort |
  xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
AB_ROUNDS=0 AB_VARIANTS=before,few,prefetch,prefetch_s4 AB_N=256,1024 PYTHONPATH=$PWD \
  timeout 120 python3 docs/h200/pass25/tail_ab.py "$R/tail_ab.json" > "$R/tail_ab.log" 2>&1
echo "tail_ab rc=$? at ${SECONDS}s"; grep -E "same bits|DIFFER|Error" "$R/tail_ab.log" | head -5
grep -E "^N=" "$R/tail_ab.log" | sed 's/"topk_stats_kernel": [0-9.]*, //' | cut -c1-120
PYTHONPATH=$PWD timeout $(( L - SECONDS > 10 ? L - SECONDS : 10 )) python3 -m pytest -q \
  -p no:cacheprovider -rs -m gpu tests/ops/test_triton_distill_gpu.py -k "tile_sort" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
