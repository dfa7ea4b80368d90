#!/usr/bin/env bash
# Pass 25, r2 (one call): tail_ab.py on this tree (the tail's variants: digests, CUDA time
# by kernel, bursts / synchronized x the GEMM), then the GPU tests of this pass's kernels
# (the sort's lone block, the second maxima's paths through the rescan, finalize in the
# last kernel, merge_runs, the direct launches) and the batch-invariance tests that cross
# the second maxima's thresholds, then docs/h200/pass22/small_ab.py while the call has
# time. OUT packed.
#   [LIMIT=420] [AB_ROUNDS=3] bash docs/h200/pass25/gpu2.sh OUT      (from the repo root)
# LIMIT: the seconds by which the tests end (the call's budget less the packing).
set -u
OUT=$1; R=$OUT/r2; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass22 docs/h200/pass25 -name '*.py' |
  sort | xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
AB_ROUNDS=${AB_ROUNDS:-3} PYTHONPATH=$PWD timeout 160 python3 docs/h200/pass25/tail_ab.py "$R/tail_ab.json" \
  > "$R/tail_ab.log" 2>&1
echo "tail_ab rc=$? at ${SECONDS}s"; grep -E "same bits|x GEMM|Error" "$R/tail_ab.log" | head -12
grep -E "^N=(256|8192) topk(8|32) " "$R/tail_ab.log" | sed 's/"topk_stats_kernel": [0-9.]*, //' | cut -c1-100
PYTHONPATH=$PWD timeout 140 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_triton_gpu.py \
  -k "tile_sort or second_maxima_change or finalizes_in or merge_runs or direct_launches" \
  > "$R/pytest_a.txt" 2>&1
echo "pytest a rc=$? at ${SECONDS}s"; tail -3 "$R/pytest_a.txt"
PYTHONPATH=$PWD timeout $(( ${LIMIT:-420} - SECONDS > 10 ? ${LIMIT:-420} - SECONDS : 10 )) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_batch_invariance_gpu.py \
  -k "topk_same_bits or second_maxima_threshold or topk_row_blocked" > "$R/pytest_b.txt" 2>&1
echo "pytest b rc=$? at ${SECONDS}s"; tail -3 "$R/pytest_b.txt"
[ $SECONDS -lt $((${LIMIT:-420} - 60)) ] && { PYTHONPATH=$PWD timeout $(( ${LIMIT:-420} - SECONDS > 10 ? ${LIMIT:-420} - SECONDS : 10 )) \
  python3 docs/h200/pass22/small_ab.py "$R/small_ab.json" > "$R/small_ab.log" 2>&1
  echo "small_ab rc=$? at ${SECONDS}s"; }
echo "done at ${SECONDS}s"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
