#!/usr/bin/env bash
# Pass 23, r1: every one-GPU test (tools/device.sh suite, WHEELS: upstream's wheels), the
# batch-invariance file alone in its own process. OUT packed.
#   bash docs/h200/pass23/gpu1.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; mkdir -p "$OUT/r1"
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass22 docs/h200/pass23 -name '*.py' |
  sort | xargs sha1sum > "$OUT/r1/sources.txt")
PART_TIMEOUT=${PART_TIMEOUT:-520} bash tools/device.sh suite "$WHL" "$OUT/r1/suite"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$OUT/r1"
