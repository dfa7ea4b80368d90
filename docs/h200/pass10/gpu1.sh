#!/usr/bin/env bash
# Pass 10, first device call: the merges' probe (merge_probe.py: before / after, the same
# bits), then the GPU tests that the CPU-only passes 9 and 10 changed or added and have not
# run: the top-k's (z ranking, the merges), the recompute kernel's derived forms, batch
# invariance, CUDA graphs, the launch cache.
#   bash docs/h200/pass10/gpu1.sh OUT      (from the repo root; the device's $OUT)
# The device has no megatron-core: its wheel travels with the call (carry
# [".venv/wheelhouse"]), fetched beforehand on the CPU machine with
#   pip download megatron-core==0.19.2 --no-deps --only-binary=:all: --python-version 3.12 \
#     -d .venv/wheelhouse/upstream
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
D=docs/h200/pass10
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  lscpu | grep -E "Model name"
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
SECONDS=0
timeout 180 python3 $D/merge_probe.py "$OUT/merge.json" > "$OUT/merge_log.txt" 2>&1
echo "merge probe exit $? at $SECONDS s"
python3 - "$OUT/merge.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(r["shape"], r["k"], "same" if r["same"] else "DIFFER",
          {m: round(x, 4) for m, x in r["x_gemm"].items()},
          {m: {k: v for k, v in p.items() if "merge" in k or "select" in k or "rescan" in k}
           for m, p in r["profile_ms_a_call"].items()})
PY
left=$((560 - SECONDS))
timeout $left python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_batch_invariance_gpu.py \
  tests/ops/test_cuda_graphs.py tests/ops/test_launch.py \
  "tests/ops/test_triton_gpu.py::test_backward_configs_change_no_bit" \
  > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -5 "$OUT/pytest.txt"
echo "done at $SECONDS s"
