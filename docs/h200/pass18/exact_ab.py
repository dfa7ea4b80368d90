"""Pass 18: the top-k's exact second maxima (topk_forward.pack_third), timed against the
rounded ones (pack_second) and none in one process, by the host's switches:

    after   EXACT_SECOND_MAX_TOKENS and SECOND_MAX_SMALL_TOKENS set past N: every launch
            stores exact second maxima and third bounds
    before  EXACT_SECOND_MAX_TOKENS = 0: the rules before this pass (pack_second from k = 8
            up to 4096 rows and from k = 32 at any N; none at k = 8 past 4096 rows)

    PYTHONPATH=. python docs/h200/pass18/exact_ab.py OUT.json        (one GPU)

bf16, T = 0.7, forwards without grad, distill_inputs' logits (std ~4 before T). Timing:
the project's protocols, bursts (tools.bench.timing.interleaved: ~300 ms, 5 rounds,
rotated, heated) and single synchronized calls (timing.synchronized, blocks, 3 rounds of
8), each x the bare bf16 GEMM, and after / before paired by round. Also: the outputs of
both equal bit for bit; each row's recomputed (row, tile) pairs; each kernel's CUDA time a
call (torch.profiler).
"""
import json
import statistics
import sys

import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import topk_forward
from tools.bench.inputs import distill_inputs
from tools.bench.timing import interleaved, synchronized

SHAPES = [(256, 4096, 151936), (1024, 4096, 151936), (4096, 4096, 151936)]
KS = (8, 32)
KNOBS = ("EXACT_SECOND_MAX_TOKENS", "SECOND_MAX_SMALL_TOKENS", "EXACT_SECOND_MAX_MIN_K")
DEFAULTS = tuple(getattr(topk_forward, name) for name in KNOBS)
# after: exact from k = 2 (the run in h100/r1 predates EXACT_SECOND_MAX_MIN_K, with which
# the tree now keeps k < 32 on pack_second)
MODES = {"after": (10 ** 9, 10 ** 9, 2), "before": (0, DEFAULTS[1], DEFAULTS[2])}


def use(mode):
    for name, value in zip(KNOBS, MODES[mode]):
        setattr(topk_forward, name, value)


def call(mode, h, w, k):
    def run():
        use(mode)
        return ops.linear_topk_logprobs(h, w, k, temperature=0.7)
    return run


def paired(a, b):
    return round(statistics.median(x / y for x, y in zip(a.ms, b.ms)), 4)


def recomputed(mode, h, w, k):
    """Mean recomputed (row, tile) pairs a row (codes below the tile count)."""
    seen = {}
    real = topk_forward.best_tiles

    def spy(tile_max, kk, *args, **kw):
        out = real(tile_max, kk, *args, **kw)
        seen["n"] = seen.get("n", 0) + int((out[1] < tile_max.shape[0]).sum())
        seen["rows"] = seen.get("rows", 0) + tile_max.shape[1]
        return out

    topk_forward.best_tiles = spy
    try:
        call(mode, h, w, k)()
    finally:
        topk_forward.best_tiles = real
    return round(seen["n"] / seen["rows"], 4)


def kernels(mode, h, w, k, calls=10):
    from torch.profiler import ProfilerActivity, profile
    fn = call(mode, h, w, k)
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
        if t:
            out[e.key[:60]] = round(t / 1000 / calls, 4)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main(path):
    res = {"device": torch.cuda.get_device_name(), "rows": []}
    with torch.no_grad():
        for n, hd, v in SHAPES:
            h, w, _ = distill_inputs(n, hd, v, 1, 0)
            for k in KS:
                row = {"n": n, "h": hd, "v": v, "k": k}
                a, b = call("after", h, w, k)(), call("before", h, w, k)()
                row["same_bits"] = all(torch.equal(x, y) for x, y in zip(a, b)
                                       if x is not None)
                row["recomputed_a_row"] = {m: recomputed(m, h, w, k) for m in MODES}
                fns = {"gemm": lambda: torch.matmul(h, w.T), "before": call("before", h, w, k),
                       "after": call("after", h, w, k)}
                t = interleaved(fns, [()], 5, burst_ms=300.0, heat_s=1.0)
                s, _ = synchronized(fns, [()], 3, "gemm", calls=24)
                for name, got in (("bursts", t), ("sync", s)):
                    row[name] = {"gemm_ms": round(got["gemm"].median_ms, 4),
                                 "before_x_gemm": paired(got["before"], got["gemm"]),
                                 "after_x_gemm": paired(got["after"], got["gemm"]),
                                 "after_over_before": paired(got["after"], got["before"])}
                row["host_ms"] = {m: round(statistics.median(t[m].host_ms), 4)
                                  for m in ("before", "after")}
                if n in (256, 4096) and k == 32 or n == 256:
                    row["kernels_ms"] = {m: kernels(m, h, w, k) for m in MODES}
                print(json.dumps(row), flush=True)
                res["rows"].append(row)
                for name, value in zip(KNOBS, DEFAULTS):
                    setattr(topk_forward, name, value)
            del h, w
            torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
