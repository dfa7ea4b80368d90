#!/usr/bin/env bash
# Pass 13, second device call: issue 20's one-run table (pass 12's gpu2.sh: every op, both
# protocols, the project's entry point) on whichever GPU comes, then the benchmark's GPU
# subcommands, tiny (`tools/device.sh smoke`, packed) and `op` / `distill` with --sync
# (pass 12's fixes of failures in bursts, phases), which no GPU has run since.
# `op --host-profile` at 256 and 32768 tokens.
#   bash docs/h200/pass13/gpu2.sh OUT      (from the repo root; carry .venv/wheelhouse)
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
# the table once a GPU kind: the H100's is in docs/h200/pass13/h100/table
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu"
case "$gpu" in *H100*) [ "${TABLE:-0}" = 1 ] ;; *) [ "${TABLE:-1}" = 1 ] ;; esac &&
  bash docs/h200/pass12/gpu2.sh "$OUT/table" | tail -32
# where a call's host time goes at the smallest and largest shape (the one-run table's fwd+bwd
# host time grew with N, 2.0 to 11.8 ms on the H100): torch.profiler's host ops, cProfile
for shape in 256,4096,151936 32768,4096,151936; do
  timeout 100 python3 -m tools.bench op --host-profile $shape --out "$OUT/host-${shape%%,*}" \
    2>&1 | grep -E "host (fwd|fb)" | cut -c1-600
done
quick=(--rounds 2 --burst-ms 20 --heat-s 0)
timeout 60 python3 -m tools.bench op --shapes 2048,1024,32768 --methods gemm,ours --sync \
  --phases fwd "${quick[@]}" --out "$OUT/opsync" > "$OUT/opsync.log" 2>&1
echo "op --sync rc=$?"; tail -4 "$OUT/opsync.log"
timeout 60 python3 -m tools.bench distill --shapes 1024,512,16384 --ks 8 --sync "${quick[@]}" \
  --out "$OUT/dsync" > "$OUT/dsync.log" 2>&1
echo "distill --sync rc=$?"; tail -4 "$OUT/dsync.log"
PACK=1 timeout 300 bash tools/device.sh smoke .venv/wheelhouse/upstream "$OUT/smoke"
# the device tool brings back 8 files: all but the table's in one tarball
# (written beside OUT, then moved in: tar of a folder that holds its own archive fails)
tar -czf "$OUT.rest.tgz" -C "$OUT" --exclude=./table . &&
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name table -exec rm -rf {} + &&
  mv "$OUT.rest.tgz" "$OUT/rest.tgz"
