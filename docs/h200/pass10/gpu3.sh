#!/usr/bin/env bash
# Pass 10, third device call: the whole top-k forward and the log-prob forward+backward of
# this tree against the tree before pass 10 (cde049d: extraction merges, the second maxima
# by a count of ties, the backward's vocab chunks by the budget alone), one process, both
# protocols. Before the call, on the CPU machine (the device has no git; .scratch is
# ignored, so the run carries it: carry [".scratch/base_pass10", ".venv/wheelhouse"]):
#   mkdir -p .scratch/base_pass10 && git archive cde049d megatron_overlay |
#     tar -x -C .scratch/base_pass10 &&
#     mv .scratch/base_pass10/megatron_overlay .scratch/base_pass10/megatron_overlay_base
#   bash docs/h200/pass10/gpu3.sh OUT      (from the repo root; the device's $OUT)
set -u
OUT=$1; mkdir -p "$OUT"
(LC_ALL=C find megatron_overlay .scratch/base_pass10 -name '*.py' | sort | xargs sha1sum \
  > "$OUT/sources.txt")
TESTS=0 ROUNDS=3 SYNC_CALLS=24 BASE=.scratch/base_pass10 \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064" METHODS=topk_ours,logprob_ours_fb \
  timeout 500 bash tools/device.sh distill .venv/wheelhouse/upstream "$OUT"
