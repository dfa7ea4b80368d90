#!/usr/bin/env bash
# Pass 25, r1 (one call): tail_ab.py (the top-k's tail by variant: digests, CUDA time by
# kernel, "before" against the default in bursts and synchronized), with TESTS=1 the
# GPU tests of gpu2.sh's first part, then docs/h200/pass22/small_ab.py on this tree and
# on the tree before this pass (BASE: its megatron_overlay package's parent folder), while
# the call has time. OUT packed.
#   [TESTS=1] bash docs/h200/pass25/gpu1.sh BASE OUT      (from the repo root)
# r1 ran it (TESTS=1) with tail_ab.py as of 746ad8e (its variants: the rescan's column
# parts and persistent programs, since reverted); tail_ab.py now holds r2's variants.
set -u
BASE=$(cd "$1" && pwd); OUT=$2; R=$OUT/r1; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass22 docs/h200/pass25 "$BASE" \
  -name '*.py' | sort | xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
AB_ROUNDS=${AB_ROUNDS:-7} PYTHONPATH=$PWD timeout 300 python3 docs/h200/pass25/tail_ab.py "$R/tail_ab.json" \
  > "$R/tail_ab.log" 2>&1
echo "tail_ab rc=$? at ${SECONDS}s"; grep -E "same bits|x GEMM|Error|error" "$R/tail_ab.log" | head -20
grep -E "^N=256 topk(8|32) (before|parts4)" "$R/tail_ab.log" | cut -c1-60
# the GPU tests of this pass's kernels (gpu2.sh's first part), where TESTS=1
[ "${TESTS:-0}" = 0 ] || { PYTHONPATH=$PWD timeout 170 python3 -m pytest -q -p no:cacheprovider -rs \
  -m gpu tests/ops/test_triton_distill_gpu.py tests/ops/test_triton_gpu.py \
  -k "rescan_parts or merge_runs or tile_sort or second_maxima_change or finalizes_in or direct_launches or topk_stage_matches" \
  > "$R/pytest_a.txt" 2>&1; echo "pytest a rc=$? at ${SECONDS}s"; tail -3 "$R/pytest_a.txt"; }
for tree in new base; do
  [ $SECONDS -lt 470 ] || break
  path=$PWD; [ $tree = base ] && path=$BASE:$PWD
  PYTHONPATH=$path timeout $((575 - SECONDS)) python3 docs/h200/pass22/small_ab.py "$R/$tree.json" \
    > "$R/$tree.log" 2>&1
  echo "== $tree rc=$? at ${SECONDS}s"; cut -c1-120 "$R/$tree.log" | grep "N=256 topk"
done
echo "done at ${SECONDS}s"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
