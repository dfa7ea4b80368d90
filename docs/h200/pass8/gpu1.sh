#!/usr/bin/env bash
# Pass 8, first device call: the backward's variants against the 3-GEMM floor (bwd_probe),
# the top-k's bitonic merge against k extractions (topk_probe), then the GPU tests of both.
set -u
OUT=$1; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
D=docs/h200/pass8
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  lscpu | grep -E "Model name"
  LC_ALL=C find megatron_overlay tests tools -name '*.py' | sort | xargs sha1sum
} > "$OUT/machine.txt" 2>&1
SECONDS=0
timeout 300 python3 $D/bwd_probe.py "$OUT/bwd.json" > "$OUT/bwd_log.txt" 2>&1
echo "bwd probe exit $? at $SECONDS s"; grep -E "floor|addmm|Error" "$OUT/bwd_log.txt" | head -40
timeout 120 python3 $D/topk_probe.py "$OUT/topk.json" > "$OUT/topk_log.txt" 2>&1
echo "topk probe exit $? at $SECONDS s"
python3 - "$OUT/topk.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(r["shape"], r["k"], r["same"], {m: round(x, 4) for m, x in r["x_gemm"].items()},
          {m: {k: v for k, v in p.items() if "merge" in k or "rescan" in k or "stats" in k}
           for m, p in r["profile_ms_a_call"].items()})
PY
left=$((570 - SECONDS))
timeout $left python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py \
  tests/ops/test_triton_distill_gpu.py -k "change_no_bit or stages_match or topk_stage or chunks" \
  > "$OUT/pytest.txt" 2>&1
echo " (pytest exit $?)" >> "$OUT/pytest.txt"; tail -5 "$OUT/pytest.txt"
echo "done at $SECONDS s"
