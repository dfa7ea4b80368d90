"""Where a small forward call's host time goes (issue 20: <= 0.3 ms a forward call).

Pass 15 r1 (small_n.py): at 256 tokens the log-prob forward ran bursts at 1.50x the GEMM
on this host, its kernels 0.52 ms of the call's 0.77: host-bound. Here each op's forward
at N = 256 (H = 4096, V = 151936, bf16, T = 0.7), enqueued while the GPU works through
~0.15 s of queued GEMMs (nothing waits for it): the call's host time, and inclusive host
time by function (perf_counter wrappers on the functions below, at their import sites;
~0.5 us a wrapped call), median over 30 calls, us.

    PYTHONPATH=. python docs/h200/pass15/host_small.py OUT.json       (one GPU)
"""
import collections
import json
import statistics
import sys
import time

import torch

from megatron_overlay import ops
from megatron_overlay.ops import forward_only, label_check, linear_logprob, validation
from megatron_overlay.ops.kernels import (check_ids, finalize_stats, gather_dot, launch,
                                          logprob_forward, merge_topk, topk_forward,
                                          topk_rescan)
from tools.bench.inputs import distill_inputs

# the module (the package's attribute of that name is the function)
linear_logprobs_at = sys.modules["megatron_overlay.ops.linear_logprobs_at"]

spent = collections.defaultdict(list)
_depth = [0]


def wrap(module, name, label=None):
    fn = getattr(module, name)
    label = label or f"{module.__name__.split('.')[-1]}.{name}"

    def timed(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            spent[label].append((time.perf_counter() - t0) * 1e6)
    setattr(module, name, timed)


for mod in (logprob_forward, finalize_stats, topk_forward, topk_rescan, gather_dot, check_ids,
            merge_topk):
    if hasattr(mod, "launch"):
        wrap(mod, "launch", "launch (all)")
    if hasattr(mod, "tile_source"):
        wrap(mod, "tile_source", "tile_source (all)")
for mod, names in ((linear_logprob, ["validate_inputs", "inverse_temperature", "shard_labels",
                                     "shard_layout", "pick_impl"]),
                   (forward_only, []), (validation, []),
                   (label_check, ["poll", "host_record", "defer_record", "defer_ids"]),
                   (topk_forward, ["_topk_range", "best_tiles", "rescan_topk", "merge_splits"]),
                   (topk_rescan, ["sort_tiles", "merge_runs"])):
    for name in names:
        wrap(mod, name)
for cls in (linear_logprob.LinearLogprobEntropy, linear_logprobs_at.LinearLogprobsAt):
    fwd = cls.forward

    def timed(ctx, *a, _fwd=fwd, _label=f"{cls.__name__}.forward"):
        t0 = time.perf_counter()
        try:
            return _fwd(ctx, *a)
        finally:
            spent[_label].append((time.perf_counter() - t0) * 1e6)
    cls.forward = staticmethod(timed)


def main(path):
    h, w, ids = distill_inputs(256, 4096, 151936, 32, 0)
    labels = ids[:, 0].contiguous()
    busy = lambda: torch.matmul(h, w.T)  # noqa: E731
    big_h = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    calls = {
        "gemm": busy,
        "logprob": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7),
        "logprob_per_token_t": lambda: ops.linear_logprob_entropy(h, w, labels,
                                                                  temperature=temps),
        "topk8": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7),
        "topk32": lambda: ops.linear_topk_logprobs(h, w, 32, temperature=0.7),
        "at32": lambda: ops.linear_logprobs_at(h, w, ids, temperature=0.7),
    }
    temps = torch.full((256,), 0.7, device="cuda")
    out = {}
    with torch.no_grad():
        for name, call in calls.items():
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            spent.clear()
            host = []
            for _ in range(30):
                torch.matmul(big_h, w.T)  # ~15 ms queued ahead of each call
                t0 = time.perf_counter()
                call()
                host.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
            parts = {k: round(statistics.median(v), 1) for k, v in spent.items()}
            counts = {k: len(v) / 30 for k, v in spent.items()}
            out[name] = {"host_us": round(statistics.median(host), 1), "parts_us": parts,
                         "calls": counts}
            print(f"{name}: host {out[name]['host_us']} us;", ", ".join(
                f"{k} {v}" + (f" x{counts[k]:g}" if counts[k] != 1 else "")
                for k, v in sorted(parts.items(), key=lambda kv: -kv[1])), flush=True)
    json.dump(out, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
