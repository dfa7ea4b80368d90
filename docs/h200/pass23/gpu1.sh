#!/usr/bin/env bash
# Pass 23, r1: the one-GPU tests (tools/device.sh suite, WHEELS: upstream's wheels): every
# file but the batch-invariance one, of which the tests SUITE_A_K selects (default: at ids'
# and the log-prob and top-k ops' N-and-position tests; SUITE_A_K= runs it whole, which
# takes a fresh H100 330-500 s). OUT packed.
#   bash docs/h200/pass23/gpu1.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; mkdir -p "$OUT/r1"
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass22 docs/h200/pass23 -name '*.py' |
  sort | xargs sha1sum > "$OUT/r1/sources.txt")
SUITE_A_K=${SUITE_A_K-"at_ids or same_bits_whatever"} PART_TIMEOUT=${PART_TIMEOUT:-480} \
  bash tools/device.sh suite "$WHL" "$OUT/r1/suite"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$OUT/r1"
