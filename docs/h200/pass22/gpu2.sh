#!/usr/bin/env bash
# Pass 22, r2: every one-GPU test (tools/device.sh suite, WHEELS: upstream's wheels), then
# the exact second maxima at k = 10, 14, 20, 28 (exact_cells.py). OUT packed.
#   bash docs/h200/pass22/gpu2.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; OUT=$2; mkdir -p "$OUT"
PART_TIMEOUT=${PART_TIMEOUT:-300} PACK=1 bash tools/device.sh suite "$WHL" "$OUT/r2"
mkdir -p "$OUT/r2b"
(LC_ALL=C find megatron_overlay tools docs/h200/pass22 docs/h200/pass18 -name '*.py' | sort |
  xargs sha1sum > "$OUT/r2b/sources.txt")
TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD timeout "${EXACT_TIMEOUT:-200}" \
  python3 docs/h200/pass22/exact_cells.py "$OUT/r2b/exact.json" > "$OUT/r2b/exact.log" 2>&1
echo "exact rc=$?"; tail -12 "$OUT/r2b/exact.log"
tar -C "$OUT" -czf "$OUT/r2b.tgz" r2b && rm -rf "$OUT/r2b"
