#!/usr/bin/env bash
# Pass 31, r4 (one call): the label check's lighter read (ops/label_check.py: a pooled
# record's view and count column kept with its buffer) against 12200e7's package, in one
# process (pass 28's host_ab.py: the same bits, a synchronized call, its host time and
# first launch, a burst's host time); then the GPU tests of the label records (CUDA
# graphs, the pinned pool, bad labels and ids), to the call's limit. BASE holds 12200e7's
# package as megatron_overlay_base. OUT packed.
#   [LIMIT=160] bash docs/h200/pass31/gpu3.sh BASE OUT      (from the repo root)
set -u
BASE=$1; LIMIT=${LIMIT:-160}
. docs/h200/prologue.sh "$2" r4 docs/h200/pass28 docs/h200/pass31
PYTHONPATH=$PWD:$BASE timeout $(left 70) python3 docs/h200/pass28/host_ab.py "$R/host_ab.json" \
  > "$R/host_ab.log" 2>&1
echo "host_ab rc=$? at ${SECONDS}s"; grep -E "DIFFER|Error|^time" "$R/host_ab.log"
echo "bits same: $(grep -c ': same$' "$R/host_ab.log")"
PYTHONPATH=$PWD timeout -s INT -k 20 $(left 10) python3 -m pytest -q -p no:cacheprovider -rs \
  -m gpu tests/ops/test_cuda_graphs.py tests/ops/test_triton_gpu.py \
  tests/ops/test_triton_distill_gpu.py -k "test_cuda_graphs or label or ids" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r4.tgz" r4 && rm -rf "$R"
