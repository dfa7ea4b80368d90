#!/usr/bin/env bash
# Pass 15, first device call: the GPU tests of this pass's changes (the label check of
# calls captured in CUDA graphs: a pinned record of their own, clean before the first
# replay; the launch cache key's Triton compile knobs), then where a small call's GPU
# time goes (small_n.py).
#   bash docs/h200/pass15/gpu1.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass15 -name '*.py' | sort | xargs sha1sum > "$OUT/sources.txt")
{ nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton",
  triton.__version__, "gpus", torch.cuda.device_count())'; lscpu | grep "Model name"; } > "$OUT/machine.txt" 2>&1
site=/tmp/site-overlay-wheel
{ PYTHONPATH=$PWD python3 -m megatron_overlay.cli wheel 0.19.2 \
    --from .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl --out /tmp/wheelhouse &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site \
    --find-links /tmp/wheelhouse "megatron-core==0.19.2" &&
  PYTHONPATH=$site:$PWD python3 -m megatron_overlay.cli status --site $site
  echo "status rc=$?"; } > "$OUT/status.txt" 2>&1
export PYTHONPATH=$site:$PWD
timeout 200 python3 docs/h200/pass15/small_n.py "$OUT/small_n.json" > "$OUT/small_n.txt" 2>&1
timeout 300 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/ops/test_cuda_graphs.py \
  tests/ops/test_triton_gpu.py > "$OUT/pytest.txt" 2>&1
tail -2 "$OUT/status.txt"
grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest.txt" | tail -15
cat "$OUT/small_n.txt" | grep -v Warn | cut -c1-900
