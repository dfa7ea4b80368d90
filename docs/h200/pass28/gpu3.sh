#!/usr/bin/env bash
# Pass 28, r3 (one call): fb_profile.py (where a 256-token forward+backward's host time
# goes, after r2's change) and sync_timeline.py for the fwd+bwd ops (where its GPU waits);
# then the GPU tests of test_triton_gpu.py and test_cuda_graphs.py r2 did not select,
# to the call's limit. OUT packed.
#   [LIMIT=400] bash docs/h200/pass28/gpu3.sh OUT      (from the repo root)
set -u
. docs/h200/prologue.sh "$1" r3 docs/h200/pass28
PYTHONPATH=$PWD timeout $(left 200) python3 docs/h200/pass28/fb_profile.py "$R/fb_profile.txt" \
  > "$R/fb_profile.log" 2>&1
echo "fb_profile rc=$? at ${SECONDS}s"
TL_OPS=gemm,logprob,logprob_fb,at8_fb PYTHONPATH=$PWD timeout $(left 150) \
  python3 docs/h200/pass28/sync_timeline.py "$R/timeline.json" > "$R/timeline.log" 2>&1
echo "timeline rc=$? at ${SECONDS}s"; grep -v "^    \|Warn\|_warn" "$R/timeline.log"
PYTHONPATH=$PWD timeout $(left 10) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_gpu.py tests/ops/test_cuda_graphs.py \
  -k "not (expanded or one_gradient or bad_label_makes or direct_d_hidden or configs_change or op_matches or backward_capture or no_host_sync or (stages_match and bfloat16))" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r3.tgz" r3 && rm -rf "$R"
