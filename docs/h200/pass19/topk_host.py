"""Pass 19: where a top-k forward call's host time goes (issue 20's host target: 0.3 ms a
forward call; the one-run table's top-k k = 32 took 0.74 ms at 256 tokens and 1.49 ms at
32768). One call enqueued behind ~0.15 s of queued GEMMs (nothing waits for the GPU), as
tools/bench/profiling.host_profile does for the log-prob op: its host time (median of 5),
then torch.profiler's host ops of one such call (self CPU time, launches counted).

    PYTHONPATH=. python docs/h200/pass19/topk_host.py OUT.json        (one GPU)
"""
import json
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from megatron_overlay import ops
from tools.bench.inputs import distill_inputs

CELLS = [(256, 8), (256, 32), (32768, 8), (32768, 32)]
H, V = 4096, 151936


def main(path):
    res = {"device": torch.cuda.get_device_name(), "cells": []}
    with torch.no_grad():
        for n, k in CELLS:
            h, w, _ = distill_inputs(n, H, V, 1, 0)
            busy = h[:4096] if n > 4096 else h

            def call():
                return ops.linear_topk_logprobs(h, w, k, temperature=0.7)

            for _ in range(3):
                call()
            torch.cuda.synchronize()
            host = []
            for _ in range(5):
                for _ in range(int(150 / max(0.5, 0.5 * busy.shape[0] / 256))):  # ~150 ms
                    torch.matmul(busy, w.T)
                t0 = time.perf_counter()
                call()
                host.append((time.perf_counter() - t0) * 1e3)
                torch.cuda.synchronize()
            for _ in range(40):
                torch.matmul(busy, w.T)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                call()
            torch.cuda.synchronize()
            ops_ = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
            launches = sum(e.count for e in ops_ if "LaunchKernel" in e.key)
            cell = {"n": n, "k": k, "host_ms": round(statistics.median(host), 4),
                    "host_ms_all": [round(x, 4) for x in host], "launches": launches,
                    "ops": [{"op": e.key[:70], "calls": e.count,
                             "self_cpu_us": round(e.self_cpu_time_total, 1)}
                            for e in ops_[:25]]}
            print(json.dumps({key: cell[key] for key in ("n", "k", "host_ms", "launches")})
                  + " top: " + "; ".join(f"{o['op']} x{o['calls']} {o['self_cpu_us']}"
                                         for o in cell["ops"][:10]), flush=True)
            res["cells"].append(cell)
            del h, w, busy
            torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
