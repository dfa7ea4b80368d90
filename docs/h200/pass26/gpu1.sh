#!/usr/bin/env bash
# Pass 26, r1 (one call, the budget's refused starts leaving room for one): the GPU tests
# of pass 25's kernels (the sort's lone block, the second maxima's paths through the
# rescan, finalize in the last kernel); the one-run table of this tree (tools/device.sh
# distill, the README's command: the top-k, at ids and log-prob ops against the bare GEMM,
# bursts and synchronized calls, N = 256 and the issue's three shapes); then pass 25's
# tail_ab.py (the rescan's prefetch and sparse stages against before/few: digests, CUDA
# time by kernel, x the GEMM) while the call has time. OUT packed.
#   [LIMIT=570] bash docs/h200/pass26/gpu1.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; R=$OUT/r1; mkdir -p "$R"; L=${LIMIT:-570}
left() { local s=$(( L - ${1:-0} - SECONDS )); echo $(( s > 10 ? s : 10 )); }  # to LIMIT, less $1 s
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass25 docs/h200/pass26 -name '*.py' |
  sort | xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
PYTHONPATH=$PWD timeout 110 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py \
  -k "tile_sort or (second_maxima_change and dtype0) or finalizes_in" > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  timeout $(left 90) bash tools/device.sh distill "$WHL" "$R" \
  > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; tail -42 "$R/distill.log"
AB_ROUNDS=${AB_ROUNDS:-2} AB_VARIANTS=before,few,prefetch,prefetch_s4,stages4 AB_N=256,1024 \
  PYTHONPATH=$PWD timeout $(left) python3 docs/h200/pass25/tail_ab.py "$R/tail_ab.json" \
  > "$R/tail_ab.log" 2>&1
echo "tail_ab rc=$? at ${SECONDS}s"; grep -E "same bits|x GEMM|Error" "$R/tail_ab.log" | head -12
grep -E "^N=" "$R/tail_ab.log" | sed 's/"topk_stats_kernel": [0-9.]*, //' | cut -c1-110
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
