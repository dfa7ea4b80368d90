"""Timing protocols compared on the same methods, to see which figures hold (``--diagnose``).

Each protocol times the same callables (name -> fn over rotating inputs) and gives each
method's median ms and its median per-round ratio to the reference, with the clocks:

  old_tool     the previous tool's loop: one call between events, shuffled order, NVML
               polled from the timing thread until the call ends, a sync after each call
  single       one call between events and a sync after it, rotated order, no polling
  cold         like single, with 50 ms of idle GPU before every call
  burst        the default (timing.interleaved): back-to-back calls, rotated order
  burst_fixed_input   the same, always the same input set (what L2 / data reuse does)
  burst_fixed_order   the same, the methods always in one order
  graph        a burst captured as a CUDA graph and replayed: no host work at all
"""

from __future__ import annotations

import random
import statistics
import time

import torch

from . import timing


def _old_tool(fns, inputs, rounds, clocks_fn):
    names = list(fns)
    rng = random.Random(0)
    out = {n: timing.Timing(n) for n in names}
    for r in range(2 + rounds):
        for n in rng.sample(names, len(names)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[n](*inputs[r % len(inputs)])
            end.record()
            samples = []
            if clocks_fn is not None:
                while not end.query() and len(samples) < 200:
                    samples.append(clocks_fn())
                    time.sleep(0.002)
            torch.cuda.synchronize()
            if r >= 2:
                out[n].ms.append(start.elapsed_time(end))
                if samples:
                    out[n].sm_mhz.append(statistics.median(s[0] for s in samples))
    return out


def _cold(fns, inputs, rounds):
    names = list(fns)
    out = {n: timing.Timing(n) for n in names}
    for n in names:
        fns[n](*inputs[0])
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            torch.cuda.synchronize()
            time.sleep(0.05)
            out[n].ms.append(timing.burst(fns[n], inputs, 1, r))
    return out


def _graph(fns, inputs, rounds, burst_ms, clocks):
    graphs, calls = {}, {}
    for n, fn in fns.items():
        for i in range(2):
            fn(*inputs[i % len(inputs)])
        torch.cuda.synchronize()
        calls[n] = max(1, round(burst_ms / max(timing.burst(fn, inputs, 1), 1e-3)))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream, as capture requires
            fn(*inputs[0])
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls[n]):
                fn(*inputs[i % len(inputs)])
        graphs[n] = g
    replay = {n: (lambda g=g: g.replay()) for n, g in graphs.items()}
    out = timing.interleaved(replay, [()], rounds, burst_ms=0.0, heat_s=2.0, warmup_calls=1,
                             clocks=clocks, single=True)
    for n in out:  # one replay = calls[n] calls
        out[n].ms = [x / calls[n] for x in out[n].ms]
        out[n].calls = calls[n]
    return out


def compare(fns, inputs, reference, rounds, burst_ms, clocks, protocols, log=print):
    """protocol -> {name: {ms, x (median per-round ratio), x_min, x_max, sm_mhz}}."""
    results = {}
    clocks_fn = clocks.read_now if clocks is not None and clocks.available else None
    for proto in protocols:
        torch.cuda.synchronize()
        if proto == "old_tool":
            got = _old_tool(fns, inputs, rounds, clocks_fn)
        elif proto == "single":
            got = timing.interleaved(fns, inputs, rounds, clocks=clocks, single=True)
        elif proto == "cold":
            got = _cold(fns, inputs, rounds)
        elif proto == "burst":
            got = timing.interleaved(fns, inputs, rounds, burst_ms=burst_ms, clocks=clocks)
        elif proto == "burst_fixed_input":
            got = timing.interleaved(fns, inputs[:1], rounds, burst_ms=burst_ms, clocks=clocks)
        elif proto == "burst_fixed_order":
            got = timing.interleaved(fns, inputs, rounds, burst_ms=burst_ms, clocks=clocks,
                                     rotate_order=False)
        elif proto == "graph":
            got = _graph(fns, inputs, rounds, burst_ms, clocks)
        else:
            raise ValueError(f"unknown protocol {proto!r}")
        ratios = timing.paired_ratios(got, reference)
        results[proto] = {}
        for n, t in got.items():
            rec = timing.summarize(t)
            if n in ratios:
                rec["x"], rec["x_min"], rec["x_max"] = ratios[n]
            results[proto][n] = rec
        log(f"  {proto}: " + ", ".join(
            f"{n} {r.get('ms', 0):.3f} ms x{r.get('x', 0):.3f} [{r.get('x_min', 0):.3f}-"
            f"{r.get('x_max', 0):.3f}] {r.get('sm_mhz') or 0:.0f} MHz"
            for n, r in results[proto].items()))
    return results
