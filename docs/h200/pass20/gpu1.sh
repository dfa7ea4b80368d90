#!/usr/bin/env bash
# Pass 20, first device call: the one-run table (issue 20's point 4; pass 12's gpu2.sh
# command) with the harness's bracketed pairing (each burst over the mean of the GEMM's
# bursts just before and after it), then exact_cells.py.
#   bash docs/h200/pass20/gpu1.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools docs/h200/pass18 docs/h200/pass20 -name '*.py' | sort |
  xargs sha1sum > "$OUT/sources.txt")
lscpu | grep "Model name" > "$OUT/cpu.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  timeout 390 bash tools/device.sh distill .venv/wheelhouse/upstream "$OUT" > "$OUT/run.log" 2>&1
echo "table rc=$?"
tail -3 "$OUT/run.log"; cat "$OUT/distill/table.md" 2>/dev/null | head -60
PYTHONPATH=$PWD timeout 170 python3 docs/h200/pass20/exact_cells.py "$OUT/exact_cells" 2>&1 |
  grep -v Warn | tee "$OUT/exact_cells.txt" | cut -c1-600
echo "exact rc=${PIPESTATUS[0]}"
