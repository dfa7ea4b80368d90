#!/usr/bin/env bash
# Pass 15, sixth device call (r6, ~2 min): the GPU tests the review's mends touch (captured
# label records kept alive and read under the lock, the launch key's knobs, fp8
# temperatures), on the final tree.
#   bash docs/h200/pass15/gpu6.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=index,name --format=csv; git log -1 --format=%H 2>/dev/null; } > "$OUT/machine.txt" 2>&1
timeout 280 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/ops/test_cuda_graphs.py \
  tests/ops/test_triton_gpu.py -k "captured_call or cached_launch or inverse_temperature or bad_labels or reuse_their_pinned or forward_capture_replays" \
  > "$OUT/pytest.txt" 2>&1
echo "rc=$?" >> "$OUT/pytest.txt"
tail -4 "$OUT/pytest.txt"
