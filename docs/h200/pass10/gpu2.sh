#!/usr/bin/env bash
# Pass 10, second device call: issue 20's ops in one run (pass 8's r4 command) with the
# merges of docs/h200/pass10_cpu.
#   bash docs/h200/pass10/gpu2.sh OUT      (from the repo root; the device's $OUT)
set -u
OUT=$1; mkdir -p "$OUT"
(LC_ALL=C find megatron_overlay tools -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
TESTS=0 ROUNDS=3 SYNC_CALLS=24 \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  timeout 500 bash tools/device.sh distill .venv/wheelhouse/upstream "$OUT"
