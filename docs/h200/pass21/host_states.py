"""Pass 21: one call's host time in the states a caller leaves the host in.

r1's host_calls.py measured single calls enqueued after a sync and ~30 ms of queued GEMMs
at 2-3x what the one-run table's bursts read (the mean of a burst's first 8 calls). Here,
for the bare GEMM, the log-prob forward and the top-k (k = 8) at 256 tokens, and a pure
Python loop (no CUDA at all), the enqueue time of one call (median of 21, us):
  burst       the 2nd-8th of 8 back-to-back calls (the mean), after a sync
  idle        right after a sync, nothing queued
  queued      after a sync and ~30 ms of queued GEMMs (r1's state)
  queued_spin as queued, then 2 ms of a Python busy loop just before the call
  queued_sleep as queued, then time.sleep(2 ms) just before the call
The Python loop tells the CPU's own state from CUDA's (the driver, the queue).

    PYTHONPATH=. python docs/h200/pass21/host_states.py OUT_DIR     (one GPU)
"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from megatron_overlay import ops
from tools.bench.inputs import distill_inputs

N, H, V, REPS = 256, 4096, 151936, 21


def spin(ms):
    t_end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < t_end:
        pass


def python_loop():
    d = {i: i for i in range(64)}
    s = 0
    for i in range(2000):
        s += d[i & 63]
    return s


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    h, w, ids = distill_inputs(N, H, V, 8, 0)
    labels = ids[:, 0].contiguous()
    hb = distill_inputs(1024, H, V, 1, 1)[0]
    fns = {"python_loop": python_loop,
           "gemm": lambda: torch.matmul(h, w.T),
           "logprob_fwd": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7),
           "topk_fwd_k8": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7)}

    def queue():
        for _ in range(15):  # ~30 ms of GEMMs on an H100
            torch.matmul(hb, w.T)

    def single(fn, before):
        times = []
        for _ in range(REPS):
            torch.cuda.synchronize()
            before()
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        return times

    def burst(fn):
        times = []
        for _ in range(REPS):
            torch.cuda.synchronize()
            fn()
            t0 = time.perf_counter()
            for _ in range(7):
                fn()
            times.append((time.perf_counter() - t0) * 1e6 / 7)
        torch.cuda.synchronize()
        return times

    states = {"burst": None, "idle": lambda: None, "queued": queue,
              "queued_spin": lambda: (queue(), spin(2)),
              "queued_sleep": lambda: (queue(), time.sleep(0.002))}
    res = {"device": torch.cuda.get_device_name(), "us": {}}
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        for rnd in range(2):  # twice, to see the spread
            for name, fn in fns.items():
                for state, before in states.items():
                    t = burst(fn) if before is None else single(fn, before)
                    res["us"].setdefault(name, {}).setdefault(state, []).append(
                        round(statistics.median(t), 1))
    for name, row in res["us"].items():
        print(f"{name:14s} " + "  ".join(f"{s} {'/'.join(str(x) for x in v)}"
                                         for s, v in row.items()), flush=True)
    (out / "host_states.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
