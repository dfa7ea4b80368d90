"""Written for a142e0c's tree (pass 14's r1); since 9218b5c calls of up to 4096 rows take
the second maxima from k = 8 whatever SECOND_MAX_MIN_K, so "base" is no longer the dense
path there (topk_threshold.py compares the two on the newer tree).

The top-k at small N (issue 20; pass 13's H100 table: k = 8 at 256 tokens 2.42 / 2.64x
the GEMM, k = 32 1.67 / 1.91x, k = 1 1.07x): would storing the tiles' second maxima from
k = 8, or 64-row rescan programs for the dense rescan, pay, and are they bitwise the same?

Variants (module constants the kernels read at each call, set here for the run only):
  base     SECOND_MAX_MIN_K = 32, dense rescan RESCAN_ROWS = 128 (the tree's)
  second8  SECOND_MAX_MIN_K = 8 (k = 8 and 16 take the sparse path: 64-row programs,
           known maxima not recomputed)
  rows64   RESCAN_ROWS = 64 (the dense rescan's programs of 64 pairs)
Either may become a function of N only if its values and ids are bitwise the base's at
every N and dtype: `SECOND_MAX_MIN_K`'s comment in topk_forward.py. So first, at a
small shape per dtype (bf16, fp16, fp32; T = 0.7 and a per-row T) and at the timed
shapes: torch.equal of values and ids against base. Then the time of each variant
against the bare bf16 GEMM, bursts (CUDA events) and single synchronized calls,
median of ROUNDS, at N = 256, 1024, 8192 (H = 4096, V = 151936), k = 8, 16, 32.

    PYTHONPATH=. python docs/h200/pass14/topk_small_n.py OUT.json        (one GPU)
    TRITON_INTERPRET=1 PYTHONPATH=. python docs/h200/pass14/topk_small_n.py --cpu
                                       (the equality checks only, tiny, in the interpreter)
"""
import json
import statistics
import sys
import time

import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import topk_forward, topk_rescan
from tools.bench.inputs import distill_inputs

CPU = "--cpu" in sys.argv
DEV = "cpu" if CPU else "cuda"
ROUNDS, BURST = 5, 10
VARIANTS = {"base": {}, "second8": {"SECOND_MAX_MIN_K": 8}, "rows64": {"RESCAN_ROWS": 64}}
DEFAULTS = {"SECOND_MAX_MIN_K": topk_forward.SECOND_MAX_MIN_K,
            "RESCAN_ROWS": topk_rescan.RESCAN_ROWS}


def use(variant):
    values = {**DEFAULTS, **VARIANTS[variant]}
    topk_forward.SECOND_MAX_MIN_K = values["SECOND_MAX_MIN_K"]
    topk_rescan.RESCAN_ROWS = values["RESCAN_ROWS"]


def topk(h, w, k, t=0.7):
    with torch.no_grad():
        out = ops.linear_topk_logprobs(h, w, k, temperature=t)
    return out[0], out[1]  # log-probs, ids


def equal_to_base(h, w, k, t):
    outs = {}
    for variant in VARIANTS:
        use(variant)
        outs[variant] = topk(h, w, k, t)
    use("base")
    base = outs["base"]
    return {v: bool(torch.equal(o[0], base[0]) and torch.equal(o[1], base[1]))
            for v, o in outs.items() if v != "base"}


def checks():
    rows = []
    n, h, v = (40, 64, 3000) if CPU else (300, 512, 20000)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        g = torch.Generator(device=DEV).manual_seed(0)
        hid = torch.randn(n, h, device=DEV, generator=g).to(dtype)
        wt = (torch.randn(v, h, device=DEV, generator=g) * 4 * h ** -0.5).to(dtype)
        per_row = 0.5 + torch.rand(n, device=DEV, generator=g)
        for k in (8, 16):
            for t in (0.7, per_row):
                row = {"dtype": str(dtype), "k": k, "T": "per-row" if t is per_row else t,
                       **equal_to_base(hid, wt, k, t)}
                rows.append(row)
                print("equal to base:", row, flush=True)
    return rows


def ms_per_call(fn, sync):
    """Median over ROUNDS of a burst of BURST calls (or BURST single synchronized calls)."""
    times = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        if sync:
            total = 0.0
            for _ in range(BURST):
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                total += time.perf_counter() - t0
            times.append(total * 1e3 / BURST)
        else:
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record()
            for _ in range(BURST):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / BURST)
    return statistics.median(times)


def timings():
    rows = []
    for n in (256, 1024, 8192):
        h, w, _ = distill_inputs(n, 4096, 151936, 8, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        floor = {s: ms_per_call(gemm, s) for s in (False, True)}
        for k in (8, 16, 32):
            same = equal_to_base(h, w, k, 0.7)
            for variant in VARIANTS:
                use(variant)
                fn = lambda: topk(h, w, k)  # noqa: E731
                fn()
                burst, sync = ms_per_call(fn, False), ms_per_call(fn, True)
                row = {"N": n, "k": k, "variant": variant, "burst_ms": burst, "sync_ms": sync,
                       "x_gemm": burst / floor[False], "sync_x": sync / floor[True],
                       "equal_to_base": same.get(variant, True)}
                rows.append(row)
                print(f"N={n:5d} k={k:2d} {variant:8s} {row['x_gemm']:.3f} / "
                      f"{row['sync_x']:.3f} x GEMM  equal={row['equal_to_base']}", flush=True)
            use("base")
        del h, w
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    result = {"checks": checks()}
    if not CPU:
        result["device"] = torch.cuda.get_device_name()
        result["timings"] = timings()
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
