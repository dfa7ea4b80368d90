#!/usr/bin/env bash
# Pass 7, fifth device call: host time and both protocols after the change, against
# c7c2970 (.scratch/base7/megatron_overlay_base) in the same process.
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD:$PWD/.scratch/base7 TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
D=docs/h200/host_i20/pass7
{ lscpu | grep -E "Model name"
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
SECONDS=0
timeout 60 python3 $D/prelaunch_probe.py 256 8192 2>&1 | tee "$OUT/prelaunch.txt"
timeout 120 python3 $D/sync_probe.py 256 8192 2>&1 | tee "$OUT/sync_probe.txt"
echo "probes done at $SECONDS s"
left=$((570 - SECONDS))
timeout $left python3 -m tools.bench distill --sync --rounds 3 --ks 8 \
  --shapes 256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936 \
  --methods logprob_ours,at_ours,topk_ours --baseline .scratch/base7 --out "$OUT/bench" 2>&1 |
  tee "$OUT/bench_log.txt" | grep -E "k=|gemm|logprob|done" | tail -40
echo "all done at $SECONDS s"
