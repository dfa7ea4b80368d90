#!/usr/bin/env bash
# Pass 32, r1 (one call): pass 31's two host-side changes, which no GPU had run.
# 1. The label check's lighter read (ops/label_check.py) against 12200e7's package, in one
#    process (pass 28's host_ab.py: the same bits, a synchronized call, its host time and
#    first launch, a burst's host time; N = 256).
# 2. The GPU tests of the label records (CUDA graphs, the pinned pool, bad labels and ids).
# 3. The harness's new field: the 256-token shape of the one-run table (tools/device.sh
#    distill, all five ops, both protocols), whose results now keep a synchronized call's
#    host time (sync_host_ms) beside a burst's.
# 4. What each op's host does before its first launch (first_launch.py).
# BASE holds 12200e7's package as megatron_overlay_base. OUT packed.
#   [LIMIT=420] bash docs/h200/pass32/gpu1.sh WHEELS BASE OUT      (from the repo root)
set -u
WHL=$1; BASE=$2; LIMIT=${LIMIT:-420}
. docs/h200/prologue.sh "$3" r1 docs/h200/pass28 docs/h200/pass32
PYTHONPATH=$PWD:$BASE timeout 150 python3 docs/h200/pass28/host_ab.py "$R/host_ab.json" \
  > "$R/host_ab.log" 2>&1
echo "host_ab rc=$? at ${SECONDS}s"; grep -E "DIFFER|Error|^time" "$R/host_ab.log"
echo "bits same: $(grep -c ': same$' "$R/host_ab.log")"; tail -30 "$R/host_ab.log"
PYTHONPATH=$PWD timeout -s INT -k 20 90 python3 -m pytest -q -p no:cacheprovider -rs \
  -m gpu tests/ops/test_cuda_graphs.py tests/ops/test_triton_gpu.py \
  tests/ops/test_triton_distill_gpu.py -k "test_cuda_graphs or label or ids" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936" timeout $(left 60) bash tools/device.sh distill "$WHL" "$R" \
  > "$R/distill.log" 2>&1
echo "distill rc=$? at ${SECONDS}s"; tail -30 "$R/distill.log"
PYTHONPATH=$PWD timeout $(left 5) python3 docs/h200/pass32/first_launch.py "$R/first_launch.txt" \
  > "$R/first_launch.log" 2>&1
echo "first_launch rc=$? at ${SECONDS}s"; grep "^==" "$R/first_launch.log"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
