#!/usr/bin/env bash
# Pass 30, r3 (one call, warm after r2, the budget's last ~4 minutes; run as this script's
# lines inline): the one-run table's commands at 256 tokens alone (the top-k, at ids and
# the log-prob op, both protocols), then pass 28's sync_timeline.py there. OUT packed.
#   bash docs/h200/pass30/gpu3.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1
. docs/h200/prologue.sh "$2" r3 docs/h200/pass28
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936" timeout 150 bash tools/device.sh distill "$WHL" "$R" \
  > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"
TL_OPS=gemm,logprob,topk1,topk8,topk32,at8 PYTHONPATH=$PWD timeout 90 \
  python3 docs/h200/pass28/sync_timeline.py "$R/timeline.json" > "$R/timeline.log" 2>&1
echo "timeline rc=$? at ${SECONDS}s"; grep -v "^    " "$R/timeline.log" | grep "x the\|sync"
head -12 "$R/distill/table.md" | tail -9
tar -C "$OUT" -czf "$OUT/r3.tgz" r3 && rm -rf "$R"
