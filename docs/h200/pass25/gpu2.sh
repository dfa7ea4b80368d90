#!/usr/bin/env bash
# Pass 25, r2 (one call, warm): the GPU tests of this pass's kernels (the rescan's column
# parts, merge_runs' parts, the lone block's placing without a sort, the second maxima's
# paths, finalize in the last kernel, the direct launches) and the batch-invariance tests
# that cross the second maxima's thresholds (and so the parts'). OUT packed.
#   bash docs/h200/pass25/gpu2.sh OUT      (from the repo root)
set -u
OUT=$1; R=$OUT/r2; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tests docs/h200/pass25 -name '*.py' | sort |
  xargs sha1sum > "$R/sources.txt")
PYTHONPATH=$PWD timeout 300 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_triton_gpu.py \
  -k "rescan_parts or merge_runs or tile_sort or second_maxima_change or finalizes_in or direct_launches or topk_stage_matches" \
  > "$R/pytest_a.txt" 2>&1
echo "pytest a rc=$? at ${SECONDS}s"; tail -3 "$R/pytest_a.txt"
PYTHONPATH=$PWD timeout $((560 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_batch_invariance_gpu.py \
  -k "topk_same_bits or second_maxima_threshold or topk_row_blocked" > "$R/pytest_b.txt" 2>&1
echo "pytest b rc=$? at ${SECONDS}s"; tail -3 "$R/pytest_b.txt"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
