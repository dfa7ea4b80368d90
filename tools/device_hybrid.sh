#!/usr/bin/env bash
# The hybrid model's GPU check in one device call: for each upstream wheel in WHEEL_DIR
# (megatron-core 0.19.2 and 0.15.3 here), the overlay's wheel of it installed through the
# pin (the README's cluster route), `status`, then tools/hybrid_check.py --device cuda.
#   tools/device_hybrid.sh WHEEL_DIR OUT_DIR        # run from the repository root
set -u
WHL=$(cd "$1" && pwd); OUT=$2; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__,
  "triton", triton.__version__)'; } 2>&1 | tee "$OUT/machine.txt"
for upstream in "$WHL"/megatron_core-*.whl; do
  release=$(basename "$upstream" | cut -d- -f2); site=/tmp/site-$release
  PYTHONPATH=$PWD python3 -m megatron_overlay.cli wheel "$release" --from "$upstream" \
    --out /tmp/wheelhouse-$release 2>&1 | tee -a "$OUT/status.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    --find-links /tmp/wheelhouse-$release "megatron-core==$release" 2>&1 | tee -a "$OUT/status.txt"
  PYTHONPATH=$site:$PWD python3 -m megatron_overlay.cli status --site "$site" 2>&1 |
    tee -a "$OUT/status.txt"
  mkdir -p "$OUT/$release"
  PYTHONPATH=$site:$PWD timeout 240 python3 tools/hybrid_check.py --device cuda \
    --out "$OUT/$release" > "$OUT/$release/log.txt" 2>&1
  echo "hybrid_check $release rc=$?" | tee -a "$OUT/status.txt"
  tail -40 "$OUT/$release/log.txt"
done
