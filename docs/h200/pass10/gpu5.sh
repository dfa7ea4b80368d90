#!/usr/bin/env bash
# Pass 10, fifth device call (r5): select_tiles_kernel at 2 rows and 2 warps a program (r4's
# sweep): the GPU tests of the top-k's merges and stage, then the top-k against cde049d
# (carry [".venv/wheelhouse", ".scratch/base_pass10"], as gpu3.sh).
#   bash docs/h200/pass10/gpu5.sh OUT      (from the repo root; the device's $OUT)
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site5 \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
(LC_ALL=C find megatron_overlay .scratch/base_pass10 -name '*.py' | sort | xargs sha1sum \
  > "$OUT/sources.txt")
PYTHONPATH=/tmp/site5:$PWD TRITON_CACHE_DIR=/tmp/triton-cache timeout 240 python3 -m pytest \
  -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_distill_gpu.py \
  -k "selection or merge_runs or topk or second" > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -3 "$OUT/pytest.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 BASE=.scratch/base_pass10 \
  SHAPES="8192,4096,151936 16384,3584,152064" METHODS=topk_ours \
  timeout 300 bash tools/device.sh distill .venv/wheelhouse/upstream "$OUT"
