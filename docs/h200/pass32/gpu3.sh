#!/usr/bin/env bash
# Pass 32, r3 (one call): whether a burst's host time includes reading the label records
# an earlier burst left (drain_ab.py), then the one-run table's 256-token shape with the
# harness reading them, untimed, before each timed burst (timing.interleaved's settle:
# methods.read_pending_label_checks), as r2's command otherwise (the device budget left
# held no second four-shape run). OUT packed.
#   [LIMIT=300] bash docs/h200/pass32/gpu3.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; LIMIT=${LIMIT:-300}
. docs/h200/prologue.sh "$2" r3 docs/h200/pass28 docs/h200/pass32
PYTHONPATH=$PWD timeout 100 python3 docs/h200/pass32/drain_ab.py "$R/drain_ab.txt" \
  > "$R/drain_ab.log" 2>&1
echo "drain_ab rc=$? at ${SECONDS}s"; tail -5 "$R/drain_ab.log"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936" \
  timeout $(left 5) bash tools/device.sh distill "$WHL" "$R" > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; grep -A18 "^Host time" "$R/distill.log"
tar -C "$OUT" -czf "$OUT/r3.tgz" r3 && rm -rf "$R"
