#!/usr/bin/env bash
# Pass 14, sixth call (r6, ~4 min): the label logit only in tiles holding a label
# (_online_stats.label_logit) against the package before it (carry .scratch/base14:
# `git archive 362b6a3 megatron_overlay` renamed megatron_overlay_base): the same bits
# (label_guard.py), the log-prob forward against it in one process (tools.bench distill
# --baseline), then the Triton stages' GPU tests.
#   bash docs/h200/pass14/gpu4.sh OUT
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools docs/h200/pass14 .scratch/base14 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
timeout 120 python3 docs/h200/pass14/label_guard.py .scratch/base14 2>&1 | tee "$OUT/label_guard.txt" | grep -vE "Warning|warn"
timeout 200 python3 -m tools.bench distill --baseline .scratch/base14 --phases fwd \
  --methods logprob_ours --ks 1 --sync --rounds 5 --heat-s 1 \
  --shapes 8192,4096,151936 16384,3584,152064 32768,4096,151936 --out "$OUT/vs_base" \
  > "$OUT/vs_base.log" 2>&1
echo "bench rc=$?"; grep -E "logprob_(ours|base)" "$OUT/vs_base.log" | cut -c1-200
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/pytest.txt"
