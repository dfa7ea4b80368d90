#!/usr/bin/env bash
# Pass 25, r2 as run (one short call: the budget left after refused starts): tail_ab.py's
# part 1 for "before", "few" and "prefetch" at 256 and 1024 tokens (digests, CUDA time by
# kernel), then the GPU tests of the sort's lone block, the second maxima's paths through
# the rescan and finalize in the last kernel, while the call has time. OUT packed.
#   [LIMIT=230] bash docs/h200/pass25/gpu3.sh OUT      (from the repo root)
set -u
OUT=$1; R=$OUT/r2; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tests docs/h200/pass25 -name '*.py' | sort |
  xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
AB_ROUNDS=0 AB_VARIANTS=before,few,prefetch AB_N=256,1024 PYTHONPATH=$PWD timeout 100 \
  python3 docs/h200/pass25/tail_ab.py "$R/tail_ab.json" > "$R/tail_ab.log" 2>&1
echo "tail_ab rc=$? at ${SECONDS}s"; grep -E "same bits|Error" "$R/tail_ab.log" | head -5
grep -E "^N=" "$R/tail_ab.log" | sed 's/"topk_stats_kernel": [0-9.]*, //' | cut -c1-110
PYTHONPATH=$PWD timeout $(( ${LIMIT:-230} - SECONDS > 10 ? ${LIMIT:-230} - SECONDS : 10 )) python3 -m pytest -q -p no:cacheprovider -rs \
  -m gpu tests/ops/test_triton_distill_gpu.py \
  -k "tile_sort or (second_maxima_change and dtype0) or finalizes_in" > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
