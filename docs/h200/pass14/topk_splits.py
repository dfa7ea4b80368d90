"""Written for a142e0c's tree (pass 14's r1: "the tree's choice" below is its rule; since
9218b5c the top-k takes the log-prob forward's splits).

The top-k forward kernel's vocab split count (issue 20; pass 13's H100 table at 8192
tokens: k = 1 1.117 / 1.078x the GEMM, k = 8 1.152 / 1.123, k = 32 1.164 / 1.163, while
the log-prob forward, the same GEMM and fold, reads 1.040 / 1.031).

The two kernels walk the same work items but choose their splits differently:
  log-prob forward  (logprob_forward.choose_splits, batch invariant) 66 splits of 9 tiles
                    at V = 151936 on 132 SMs: 4224 items at 8192 tokens, 32 full waves;
  top-k             (topk_forward._splits: span with ITEM_COST_TILES = 2, nearest two
                    waves) 2 splits of 297: 128 items, one wave with 4 of 132 SMs idle.
ITEM_COST_TILES was measured with an older kernel whose items also took top-k rounds.
So: the whole op (linear_topk_logprobs, batch invariant as by default) at forced split
counts, each against the bare bf16 GEMM timed beside it, bursts (CUDA events) and single
synchronized calls, median of ROUNDS; every count's values and ids checked bitwise against
the default's (they must not depend on the split). Then one default call of each k under
torch.profiler: CUDA time by kernel.

    PYTHONPATH=. python docs/h200/pass14/topk_splits.py OUT.json       (one GPU)
"""
import json
import math
import statistics
import sys
import time

import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import topk_forward
from megatron_overlay.ops.kernels.launch import cdiv
from tools.bench.inputs import distill_inputs

ROUNDS, BURST = 5, 8
DEFAULT_SPLITS = topk_forward._splits
# (N, H, V): k -> split counts (None: the tree's choice)
PLAN = {
    (8192, 4096, 151936): {1: [None, 3, 6, 11, 22, 33, 66], 8: [None, 6, 11, 22, 33, 66],
                           32: [None, 6, 11, 22, 33, 66]},
    (16384, 3584, 152064): {8: [None, 11, 22, 33, 66], 32: [None, 3, 11, 33, 66]},
    (32768, 4096, 151936): {1: [None, 11, 22, 66], 8: [None, 22, 66], 32: [None, 11, 66]},
}
chosen = {}


def force(splits):
    """topk_forward._splits for the next calls: ``splits`` (None: the tree's), recording
    what each launch took."""
    def pick(num_m, num_v, *args):  # (n_rows, num_sms, chunk, ...) as the tree's _splits
        if splits is None:
            out = DEFAULT_SPLITS(num_m, num_v, *args)
        else:
            unit = args[2] or 1  # pass 14's tree: the chunk (None: not invariant)
            per = cdiv(cdiv(num_v, splits), unit) * unit
            out = (math.ceil(num_v / per), per)
        chosen[(num_m, splits)] = out
        return out
    topk_forward._splits = pick


def ms_per_call(fn, sync):
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


def topk(h, w, k):
    with torch.no_grad():
        out = ops.linear_topk_logprobs(h, w, k, temperature=0.7)
    return out.topk_log_probs, out.topk_ids


def profile(h, w, k):
    force(None)
    topk(h, w, k)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            topk(h, w, k)
        torch.cuda.synchronize()
    rows = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            rows[e.key[:60]] = round(t / 3 / 1e3, 4)  # ms a call
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


def main(path):
    rows, profiles = [], []
    for (n, hd, v), per_k in PLAN.items():
        h, w, _ = distill_inputs(n, hd, v, 1, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        for k, counts in per_k.items():
            force(None)
            base = topk(h, w, k)
            floor = {s: ms_per_call(gemm, s) for s in (False, True)}
            for splits in counts:
                force(splits)
                got = topk(h, w, k)
                same = bool(torch.equal(got[0], base[0]) and torch.equal(got[1], base[1]))
                fn = lambda: topk(h, w, k)  # noqa: E731
                burst, sync = ms_per_call(fn, False), ms_per_call(fn, True)
                took = sorted({out for (m, s), out in chosen.items() if s == splits})
                row = {"N": n, "H": hd, "V": v, "k": k, "splits": splits, "took": took,
                       "burst_ms": burst, "sync_ms": sync, "x_gemm": burst / floor[False],
                       "sync_x": sync / floor[True], "equal_to_default": same,
                       "gemm_ms": floor}
                rows.append(row)
                print(f"N={n:5d} k={k:2d} splits={str(splits):4s} took {took}: "
                      f"{row['x_gemm']:.3f} / {row['sync_x']:.3f} x GEMM equal={same}",
                      flush=True)
            force(None)
            if n == 8192:
                prof = profile(h, w, k)
                profiles.append({"N": n, "k": k, "ms_per_call": prof})
                print(f"profile N={n} k={k}:", json.dumps(prof), flush=True)
        del h, w
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows,
                   "profiles": profiles}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
