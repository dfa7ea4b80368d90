#!/usr/bin/env bash
# Pass 20, the one-run table again (r2): r1's distill/results.json and table.md did not come
# back (the device tool returns a limited number of files), so this call runs gpu1.sh's
# table alone and leaves OUT as one tarball.
#   bash docs/h200/pass20/gpu1b.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT/run"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools docs/h200/pass20 -name '*.py' | sort |
  xargs sha1sum > "$OUT/run/sources.txt")
lscpu | grep "Model name" > "$OUT/run/cpu.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  timeout 420 bash tools/device.sh distill .venv/wheelhouse/upstream "$OUT/run" \
  > "$OUT/run/run.log" 2>&1
echo "table rc=$?"
tar -C "$OUT" -czf "$OUT/r2.tgz" run && rm -rf "$OUT/run"
ls -la "$OUT"
