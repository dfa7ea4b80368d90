#!/usr/bin/env bash
# Pass 32, r1 (one call): pass 31's two host-side changes, which no GPU had run.
# (The harness's new field, sync_host_ms, runs in r2's table.)
# 1. The label check's lighter read (ops/label_check.py) against 12200e7's package, in one
#    process (pass 28's host_ab.py: the same bits, a synchronized call, its host time and
#    first launch, a burst's host time; N = 256).
# 2. The GPU tests of the label records (CUDA graphs, the pinned pool, bad labels and ids).
# 3. What each op's host does before its first launch (first_launch.py).
# BASE holds 12200e7's package as megatron_overlay_base. OUT packed.
#   [LIMIT=330] bash docs/h200/pass32/gpu1.sh BASE OUT      (from the repo root)
set -u
BASE=$1; LIMIT=${LIMIT:-330}
. docs/h200/prologue.sh "$2" r1 docs/h200/pass28 docs/h200/pass32
PYTHONPATH=$PWD:$BASE timeout 150 python3 docs/h200/pass28/host_ab.py "$R/host_ab.json" \
  > "$R/host_ab.log" 2>&1
echo "host_ab rc=$? at ${SECONDS}s"; grep -E "DIFFER|Error|^time" "$R/host_ab.log"
echo "bits same: $(grep -c ': same$' "$R/host_ab.log")"; tail -30 "$R/host_ab.log"
PYTHONPATH=$PWD timeout -s INT -k 20 90 python3 -m pytest -q -p no:cacheprovider -rs \
  -m gpu tests/ops/test_cuda_graphs.py tests/ops/test_triton_gpu.py \
  tests/ops/test_triton_distill_gpu.py -k "test_cuda_graphs or label or ids" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
PYTHONPATH=$PWD timeout $(left 5) python3 docs/h200/pass32/first_launch.py "$R/first_launch.txt" \
  > "$R/first_launch.log" 2>&1
echo "first_launch rc=$? at ${SECONDS}s"; grep "^==" "$R/first_launch.log"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
