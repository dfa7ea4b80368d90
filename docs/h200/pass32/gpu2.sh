#!/usr/bin/env bash
# Pass 32, r2 (one call, nothing else in it): the one-run table of this tree at all four
# shapes on one card (tools/device.sh distill, the README's command, as pass 31's r1),
# now with each synchronized call's host time (sync_host_ms) beside a burst's. OUT packed.
#   [LIMIT=590] bash docs/h200/pass32/gpu2.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; LIMIT=${LIMIT:-590}
. docs/h200/prologue.sh "$2" r2 docs/h200/pass32
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  timeout $(left 5) bash tools/device.sh distill "$WHL" "$R" > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; tail -48 "$R/distill.log"
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
