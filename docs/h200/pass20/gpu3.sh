#!/usr/bin/env bash
# Pass 20, last device call: the harness's final schedule (57a5d20 and the review's mends:
# the floor between the methods, each ratio over its round's median floor) on a GPU, at
# tiny sizes: distill with --sync and --sweep (which crashed from 14e9679 to the mends),
# op with --sync and --baseline. OUT ends as one tarball.
#   bash docs/h200/pass20/gpu3.sh OUT      (from the repo root)
set -u
OUT=$1; mkdir -p "$OUT/r4"
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
(LC_ALL=C find megatron_overlay tools -name '*.py' | sort | xargs sha1sum > "$OUT/r4/sources.txt")
mkdir -p /tmp/b && cp -r megatron_overlay /tmp/b/megatron_overlay_base
quick=(--rounds 2 --burst-ms 20 --heat-s 0 --sync)
runs=(
  "distill --shapes 1024,512,16384 --ks 1,8 ${quick[*]} --sweep 1024,512,16384,8 --sweep-splits 1,2"
  "op --shapes 2048,1024,32768 --methods gemm,base,ours --baseline /tmp/b --phases both --no-grad-check ${quick[*]}"
)
for i in "${!runs[@]}"; do
  start=$SECONDS
  timeout 85 python3 -m tools.bench ${runs[$i]} --out "$OUT/r4/$i" > "$OUT/r4/$i.log" 2>&1
  echo "rc=$? $((SECONDS - start))s bench ${runs[$i]}" | tee -a "$OUT/r4/summary.txt"
  tail -4 "$OUT/r4/$i.log"
done
tar -C "$OUT" -czf "$OUT/r4.tgz" r4 && rm -rf "$OUT/r4"
