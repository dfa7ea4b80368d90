#!/usr/bin/env bash
# Pass 31, r2 (one call): every one-GPU `gpu` test on this tree (tools/device.sh suite:
# 0.19.2 through the overlay's wheel and the pin, four pytest processes at once), which no
# call has run whole since pass 29's rules and pass 30's fix. OUT packed.
#   [LIMIT=590] bash docs/h200/pass31/gpu2.sh WHEELS OUT      (from the repo root)
set -u
WHL=$1; LIMIT=${LIMIT:-590}
. docs/h200/prologue.sh "$2" r2 docs/h200/pass31
PART_TIMEOUT=$(left 40) timeout $(left 5) bash tools/device.sh suite "$WHL" "$R" \
  > "$R/suite.log" 2>&1
echo "suite rc=$? at ${SECONDS}s"; cat "$R/suite.log" | tail -40
for p in a b c d; do grep -E "^(FAILED|ERROR)" "$R/pytest_$p.txt" | head -20; done
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
