#!/usr/bin/env bash
# Pass 12, first device call: every `gpu` test and the demo on the tree as it stands
# (megatron-core 0.19.2 through the overlay's wheel and the pin: `tools/device.sh verify`),
# the first full GPU run since 2026-12-02 (passes 8-11 ran their own tests only).
#   bash docs/h200/pass12/gpu1.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
(LC_ALL=C find megatron_overlay tools tests -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
PYTEST_TIMEOUT=420 timeout 560 bash tools/device.sh verify .venv/wheelhouse/upstream "$OUT"
