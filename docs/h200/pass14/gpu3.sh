#!/usr/bin/env bash
# Pass 14, fifth call (r5, ~1 min): CUDA time by kernel of one default top-k call (k = 8, 32)
# at the issue's three shapes on the tree with the new split policy.
#   bash docs/h200/pass14/gpu3.sh OUT
set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
timeout 200 python3 - "$OUT/profiles.json" <<'PY' 2>&1 | grep -vE "Warning|warn"
import json, sys
import torch
sys.path.insert(0, "docs/h200/pass14")
from topk_splits import profile
from tools.bench.inputs import distill_inputs
out = []
for n, hd, v in ((8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)):
    h, w, _ = distill_inputs(n, hd, v, 1, 0)
    g = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.matmul(h, w.T); g[0].record(); torch.matmul(h, w.T); g[1].record(); g[1].synchronize()
    for k in (1, 8, 32):
        prof = profile(h, w, k)
        out.append({"N": n, "H": hd, "V": v, "k": k, "gemm_ms": g[0].elapsed_time(g[1]),
                    "ms_per_call": prof})
        print(n, k, f"gemm {out[-1]['gemm_ms']:.2f}", json.dumps(prof), flush=True)
    del h, w
    torch.cuda.empty_cache()
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
