#!/usr/bin/env bash
# Pass 29, r1 (one call): tail_sweep.py (the top-k's tail kernels by launch setting, then
# the picks together against the defaults), then the GPU tests of the settings' paths
# (merge_runs' two forms, the sort's lone blocks, best tiles by selection / extraction).
# OUT packed.
#   [LIMIT=560] bash docs/h200/pass29/gpu1.sh OUT      (from the repo root)
set -u
LIMIT=${LIMIT:-560}
. docs/h200/prologue.sh "$1" r1 docs/h200/pass25 docs/h200/pass29
PYTHONPATH=$PWD timeout $(left 170) python3 docs/h200/pass29/tail_sweep.py "$R/tail_sweep.json" \
  > "$R/tail_sweep.log" 2>&1
echo "sweep rc=$? at ${SECONDS}s"; grep -v "^N=" "$R/tail_sweep.log" | tail -20
PYTHONPATH=$PWD timeout $(left 95) python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_triton_distill_gpu.py -k "merge_runs_matches or tile_sort_matches or best_tiles_selection or finalizes_in" \
  > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
# the picks applied (apply_picks.py): the top-k's invariance tests and the stage's
[ -f "$R/tail_sweep.json" ] && PICKS_JSON=$R/tail_sweep.json PYTHONPATH=$PWD:$PWD/docs/h200/pass29 \
  timeout $(left 5) python3 -m pytest -q -p no:cacheprovider -p apply_picks -rs -m gpu -s \
  tests/ops/test_batch_invariance_gpu.py tests/ops/test_triton_distill_gpu.py \
  -k "topk_same_bits or (topk_is_invariant and bf16 and not logits) or (topk_stage_matches and dtype0) or (second_maxima_change and dtype0) or finalizes_in" \
  > "$R/pytest_picks.txt" 2>&1
echo "pytest with the picks rc=$? at ${SECONDS}s"; grep apply_picks "$R/pytest_picks.txt" | head -1; tail -3 "$R/pytest_picks.txt"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
