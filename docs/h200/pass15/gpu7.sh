#!/usr/bin/env bash
# Pass 15, seventh device call (r7, ~2 min): the counting sort in one launch where the
# pairs fit one block (tile_sort ONE_BLOCK): the sort against torch.sort, the top-k stage
# and its invariance tests that take that path at small N.
#   bash docs/h200/pass15/gpu7.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
nvidia-smi --query-gpu=index,name --format=csv > "$OUT/machine.txt" 2>&1
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/ops/test_triton_distill_gpu.py \
  tests/ops/test_batch_invariance_gpu.py \
  -k "tile_sort or topk_stage_matches or ranks_z or second_maxima_change or topk_same_bits" \
  > "$OUT/pytest.txt" 2>&1
echo "rc=$?" >> "$OUT/pytest.txt"
tail -4 "$OUT/pytest.txt"
