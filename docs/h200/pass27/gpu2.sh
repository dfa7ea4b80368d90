#!/usr/bin/env bash
# Pass 27, r2: after r1 (tail_ab: 4 stages on the rescan's sparse path cut its time at
# 256 and 1024 tokens with the same bits), RESCAN_STAGES_SPARSE = 4 by default. The GPU
# tests of the top-k paths it takes (the -k below selects 38: the distillation file's
# top-k stage in bf16, second maxima in bf16 and fp16, finalize; the invariance file's
# second-maxima threshold tests in every precision mode, its "second_maxima" matching
# them all); tail_ab at 8192 tokens, meant as few against stages4, which tail_ab skips
# at 8192 (it ran few only; stages_big.py, r3, times both); then the one-run table's
# top-k rows (tools/device.sh distill, METHODS=topk_ours). OUT packed.
#   [LIMIT=400] bash docs/h200/pass27/gpu2.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; R=$OUT/r2; mkdir -p "$R"; L=${LIMIT:-400}
left() { local s=$(( L - ${1:-0} - SECONDS )); echo $(( s > 10 ? s : 10 )); }  # to LIMIT, less $1 s
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass25 docs/h200/pass27 -name '*.py' |
  sort | xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
PYTHONPATH=$PWD timeout 140 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_batch_invariance_gpu.py \
  -k "(second_maxima and not dtype2) or (topk_stage_matches and dtype0) or finalizes_in or (invariant_across and (bf16 or fp16) and not logits)" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
AB_ROUNDS=0 AB_VARIANTS=few,stages4 AB_N=8192 PYTHONPATH=$PWD timeout $(left 150) \
  python3 docs/h200/pass25/tail_ab.py "$R/tail_ab.json" > "$R/tail_ab.log" 2>&1
echo "tail_ab rc=$? at ${SECONDS}s"; grep -E "same bits|Error" "$R/tail_ab.log" | head -4
grep -E "^N=" "$R/tail_ab.log" | sed 's/"topk_stats_kernel": [0-9.]*, //' | cut -c1-110
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  timeout $(left) bash tools/device.sh distill "$WHL" "$R" > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; grep -E "topk_ours" "$R/distill.log"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
