#!/usr/bin/env bash
# Pass 28, r1 (one call): sync_timeline.py at 256 tokens (where a synchronized small
# call's time goes: the host's time to its first launch, each kernel and the gaps, on the
# GPU's clock); then the tests pass 27's r2 / r4 selected that neither reached (the 24th
# to 38th of its -k in collection order). OUT packed.
#   [LIMIT=400] bash docs/h200/pass28/gpu1.sh OUT      (from the repo root)
set -u
. docs/h200/prologue.sh "$1" r1 docs/h200/pass28
PYTHONPATH=$PWD timeout $(left 120) python3 docs/h200/pass28/sync_timeline.py "$R/timeline.json" \
  > "$R/timeline.log" 2>&1
echo "timeline rc=$? at ${SECONDS}s"; cat "$R/timeline.log" | grep -v "^    " ; grep -c "" "$R/timeline.log"
SEL="(second_maxima and not dtype2) or (topk_stage_matches and dtype0) or finalizes_in or (invariant_across and (bf16 or fp16) and not logits)"
FILES="tests/ops/test_triton_distill_gpu.py tests/ops/test_batch_invariance_gpu.py"
PYTHONPATH=$PWD python3 -m pytest -q -p no:cacheprovider --collect-only -m gpu $FILES -k "$SEL" \
  2>/dev/null | grep "::" > "$R/selected.txt"
echo "selected $(wc -l < "$R/selected.txt"), running 24-38"
sed -n 24,38p "$R/selected.txt" | PYTHONPATH=$PWD xargs -d '\n' timeout $(left 15) \
  python3 -m pytest -q -p no:cacheprovider -rs -m gpu > "$R/pytest.txt" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$R/pytest.txt"
tar -C "$OUT" -czf "$OUT/r1.tgz" r1 && rm -rf "$R"
