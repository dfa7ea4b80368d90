#!/usr/bin/env bash
# Pass 21, r4: the host states (host_states.py) of the tree before this pass's launch and
# stage-pick changes (BASE: its megatron_overlay package's parent folder) and after, two
# runs each, alternated in one machine; then host_calls.py on this tree. OUT packed.
#   bash docs/h200/pass21/gpu2.sh BASE OUT      (from the repo root)
set -u
BASE=$(cd "$1" && pwd); OUT=$2; mkdir -p "$OUT/r4"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools docs/h200/pass21 "$BASE" -name '*.py' | sort |
  xargs sha1sum > "$OUT/r4/sources.txt")
lscpu | grep "Model name" > "$OUT/r4/cpu.txt"
for i in 1 2; do
  for tree in base new; do
    path=$PWD; [ $tree = base ] && path=$BASE:$PWD
    PYTHONPATH=$path timeout 120 python3 docs/h200/pass21/host_states.py "$OUT/r4/$tree$i" \
      > "$OUT/r4/$tree$i.log" 2>&1
    echo "== $tree$i rc=$?"; cat "$OUT/r4/$tree$i.log"
  done
done
PYTHONPATH=$PWD timeout 200 python3 docs/h200/pass21/host_calls.py "$OUT/r4/calls" \
  > "$OUT/r4/calls.log" 2>&1
echo "host_calls rc=$?"; grep "==" "$OUT/r4/calls/host_calls.txt"
tar -C "$OUT" -czf "$OUT/r4.tgz" r4 && rm -rf "$OUT/r4"
