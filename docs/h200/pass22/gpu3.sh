#!/usr/bin/env bash
# Pass 22, r3: the GPU tests r2 left unfinished or failing, on the label check's fix (the
# top-k op queues its record even where an earlier call's bad labels raise): the
# batch-invariance file and test_cuda_graphs.py + test_head_precision.py, two pytest
# processes at once, 0.19.2 through the overlay's wheel (WHEELS: upstream's). OUT packed.
#   bash docs/h200/pass22/gpu3.sh WHEELS OUT      (from the repo root)
set -u
WHL=$(cd "$1" && pwd); OUT=$2; R=$OUT/r3; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tests -name '*.py' | sort | xargs sha1sum > "$R/sources.txt")
site=/tmp/site-overlay-wheel
if [ ! -d $site/megatron/core ]; then
  PYTHONPATH=$PWD python3 -m megatron_overlay.cli wheel 0.19.2 \
    --from "$WHL"/megatron_core-0.19.2-*.whl --out /tmp/wheelhouse-0.19.2 > "$R/status.txt" 2>&1
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site \
    --find-links /tmp/wheelhouse-0.19.2 "megatron-core==0.19.2" >> "$R/status.txt" 2>&1
fi
export PYTHONPATH=$site:$PWD
part() {  # NAME TIMEOUT FILES...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m pytest -q -p no:cacheprovider -rs -m gpu "$@" \
    > "$R/pytest_$name.txt" 2>&1
  echo "part $name rc=$?" >> "$R/pytest_$name.txt"
}
part a "${A_TIMEOUT:-430}" tests/ops/test_batch_invariance_gpu.py &
part b 250 tests/ops/test_cuda_graphs.py tests/ops/test_head_precision.py &
wait
for p in a b; do
  echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$R/pytest_$p.txt" | tail -8
done
tar -C "$OUT" -czf "$OUT/r3.tgz" r3 && rm -rf "$R"
