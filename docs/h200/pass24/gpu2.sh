#!/usr/bin/env bash
# Pass 24, r2 (one call): direct_ab.py (this pass's host-side changes off / on in one
# process: the same bits, host time, time to the first launch, cProfile); the GPU tests of
# direct launches, the launch cache and CUDA graphs; with TABLE=1 then the one-run table
# (tools/device.sh distill, the README's command). OUT packed.
#   bash docs/h200/pass24/gpu2.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; R=$OUT/r2; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass24 -name '*.py' | sort |
  xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
AB_ROUNDS=7 AB_BITS_N=256 PYTHONPATH=$PWD timeout 170 python3 docs/h200/pass24/direct_ab.py "$R/direct_ab.json" \
  > "$R/direct_ab.log" 2>&1
echo "direct_ab rc=$? at ${SECONDS}s"; grep -E "^(bits.*DIFFER|plans|host|triton)" "$R/direct_ab.log"
grep -c "same$" "$R/direct_ab.log"
mkdir -p /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  "$WHL"/megatron_core-0.19.2-*.whl
PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_gpu.py tests/ops/test_cuda_graphs.py \
  -k "direct_launches or cached_launch or test_cuda_graphs" > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
[ "${TABLE:-0}" = 0 ] || TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  timeout $((575 - SECONDS)) bash tools/device.sh distill "$WHL" "$R" | tail -40
echo "done at ${SECONDS}s"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
