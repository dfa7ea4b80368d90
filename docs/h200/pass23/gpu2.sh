#!/usr/bin/env bash
# Pass 23, r2 (one call): the one-run table (tools/device.sh distill, the README's command),
# then the top-k's bad-label GPU test as fixed after r1, then docs/h200/pass22/small_ab.py on
# the tree before this pass (BASE: its megatron_overlay package's parent folder) and on
# this one, alternated while the call has time (outputs' digests, GPU time by kernel,
# launches, host time). OUT packed.
#   bash docs/h200/pass23/gpu2.sh WHEELS BASE OUT      (from the repo root)
set -u
WHL=$1; BASE=$(cd "$2" && pwd); OUT=$3; R=$OUT/r2; mkdir -p "$R"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests docs/h200/pass22 docs/h200/pass23 "$BASE" \
  -name '*.py' | sort | xargs sha1sum > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"
} > "$R/host.txt" 2>&1
TESTS=0 ROUNDS=3 SYNC_CALLS=24 METHODS=topk_ours,at_ours,at_ours_fb,logprob_ours,logprob_ours_fb \
  SHAPES="256,4096,151936 8192,4096,151936 16384,3584,152064 32768,4096,151936" \
  timeout 330 bash tools/device.sh distill "$WHL" "$R" | tail -40
PYTHONPATH=$PWD timeout 90 python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/ops/test_cuda_graphs.py -k bad_labels > "$R/pytest_bad_labels.txt" 2>&1
echo "pytest rc=$?"; tail -3 "$R/pytest_bad_labels.txt"
for i in 1 2; do
  for tree in base new; do
    [ $SECONDS -lt 470 ] || break 2
    path=$PWD; [ $tree = base ] && path=$BASE:$PWD
    PYTHONPATH=$path timeout 100 python3 docs/h200/pass22/small_ab.py "$R/$tree$i.json" \
      > "$R/$tree$i.log" 2>&1
    echo "== $tree$i rc=$? at ${SECONDS}s"; cut -c1-150 "$R/$tree$i.log" | grep "N=256"
  done
done
tar -C "$OUT" -czf "$OUT/r2.tgz" r2 && rm -rf "$R"
