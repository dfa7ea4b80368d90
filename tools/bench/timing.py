"""Steady-state timing of several methods, interleaved, with paired ratios.

Why this protocol (measured: docs/BENCHMARKS.md, "Which figures hold"):
  - bursts: a method runs ``calls`` times back to back between two CUDA events, the host
    enqueueing ahead of the GPU, so that the figure is the method's sustained time (as in a
    training step), not one call plus launch latency plus the clock ramp after an idle gap;
  - interleaved rounds: each round times every method once, in an order rotated from round
    to round, so that drift (power, temperature) falls on all methods alike;
  - paired ratios: a method's ratio to the reference is taken within each round and the
    median over rounds is reported, with its spread, instead of a ratio of two medians;
  - the floor between the methods (``bracket``, the tools' default): within a round the
    reference runs before every other method's burst and after the last, and its figure
    for the round is the median of those bursts: a reference of many bursts spread over
    the round, where one burst a round, up to a round's length away from a method's, moved
    every ratio of its round with it. On a power-capped GPU bursts seconds apart differ by
    a few percent (pass 19's H100 at its 700 W limit: the GEMM's three rounds at 32768
    tokens 56.35 / 58.78 / 58.87 ms); pairing each burst with the mean of the two floor
    bursts around it instead gave wider spreads over the rounds than this median in pass
    20's run (docs/cpu/pairing_spread.py, one run of 3 rounds): which suggests the
    bursts' differences are mostly not drift;
  - a heat-up of the GPU to its steady power state before the first round, and inputs
    rotated between calls (each set larger than the 50 MB L2).
``burst_ms`` sets how much work a burst holds; ``calls`` = ceil(burst_ms / one call's ms).
``cuda=False`` times with the host clock instead (CPU tensors): the tools' smoke runs on a
machine without a GPU (tests/tools), not a benchmark.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass, field

import torch


@dataclass
class Timing:
    """One method's per-round milliseconds per call, and the clock during each round."""
    name: str
    calls: int = 1
    ms: list = field(default_factory=list)
    sm_mhz: list = field(default_factory=list)
    watts: list = field(default_factory=list)
    host_ms: list = field(default_factory=list)
    error: str | None = None

    @property
    def median_ms(self):
        return statistics.median(self.ms) if self.ms else None

    @property
    def median_host_ms(self):
        return statistics.median(self.host_ms) if self.host_ms else None


# The host's enqueue time is taken over a burst's first calls only: a burst of a fast
# method (N = 256: ~550 calls, 2-8 launches each) fills the GPU's launch queue (~1024
# launches), after which each launch waits for the GPU and the "host" time is the GPU's.
HOST_CALLS = 8


def burst(fn, inputs, calls: int, first: int = 0, host: list | None = None,
          cuda: bool = True) -> float:
    """Milliseconds per call of ``calls`` back-to-back calls fn(*inputs[i % len]).
    ``host``: gets the host milliseconds per call spent enqueueing the first
    ``HOST_CALLS`` (the first one after the previous burst's sync included), unless the
    method itself synchronizes."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    t_host = None
    for i in range(calls):
        fn(*inputs[(first + i) % len(inputs)])
        if i + 1 == HOST_CALLS:
            t_host = time.perf_counter()
    t1 = time.perf_counter()
    if host is not None:
        host.append((((t_host or t1) - t0) * 1e3) / min(calls, HOST_CALLS))
    if not cuda:
        return (t1 - t0) * 1e3 / calls
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def heat(fn, inputs, seconds: float, cuda: bool = True) -> None:
    """Run ``fn`` until ``seconds`` have passed: the GPU reaches its steady power state."""
    t_end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < t_end:
        burst(fn, inputs, 4, i, cuda=cuda)
        i += 4


def interleaved(fns: dict, inputs, rounds: int, *, burst_ms: float = 300.0,
                heat_s: float = 2.0, warmup_calls: int = 2, clocks=None, single: bool = False,
                rotate_order: bool = True, cuda: bool = True, log=print,
                bracket: str | None = None, settle=None) -> dict:
    """Time every fn in ``fns`` (name -> callable) ``rounds`` times, interleaved.

    ``single``: one call per timing and a sync after it (the old protocol, kept for
    ``--diagnose``). A method that raises is dropped with its error recorded.
    ``bracket``: the reference's name (one of ``fns``): each round runs it before every
    other method and after the last (``bracketed``); its figure for the round is the
    median of those bursts, which paired_ratios pairs each method's with. ``settle``:
    called, untimed, before each timed burst (methods.read_pending_label_checks)."""
    out = {name: Timing(name) for name in fns}
    live = []
    for name, fn in fns.items():  # compile, autotune, and size the bursts
        try:
            for i in range(warmup_calls):
                fn(*inputs[i % len(inputs)])
            if cuda:
                torch.cuda.synchronize()
            one = burst(fn, inputs, 1, cuda=cuda)
            out[name].calls = 1 if single else max(1, math.ceil(burst_ms / max(one, 1e-3)))
            live.append(name)
        except Exception as e:  # a peer that fails at this shape
            out[name].error = f"{type(e).__name__}: {str(e)[:300]}"
            log(f"  {name}: {out[name].error}")
        if cuda:
            torch.cuda.empty_cache()
    if live and heat_s > 0:
        heat(fns[live[0]], inputs, heat_s, cuda=cuda)
    for r in range(rounds if live else 0):  # none left: each has its error
        ref = bracket if bracket in live else None
        order = rotated([name for name in live if name != ref], r if rotate_order else 0)

        def timed(name):
            t = out[name]
            if settle is not None:
                settle()
            t0 = time.perf_counter()
            ms = burst(fns[name], inputs, t.calls, r, host=t.host_ms, cuda=cuda)
            t1 = time.perf_counter()
            got = clocks.window(t0, t1) if clocks is not None else None
            if got is not None:
                t.sm_mhz.append(got[0])
                t.watts.append(got[1])
            return ms

        bracketed(order, ref, timed, out)
    return out


def rotated(names: list, r: int) -> list:
    """``names`` rotated left by ``r`` (round r's order)."""
    return names[r % len(names):] + names[:r % len(names)] if names else []


def bracketed(order: list, reference: str | None, timed, out: dict) -> None:
    """One round: ``timed(name)`` -> ms of each name in ``order``, appended to its
    Timing's ``ms``; with a ``reference`` (not in ``order``), it runs first and again after
    every name, and its ``ms`` gets the median of its runs (None where ``timed`` gave None
    for all: synchronized's, for a method that raised)."""
    if reference is None:
        for name in order:
            out[name].ms.append(timed(name))
        return
    runs = [timed(reference)]
    for name in order:
        out[name].ms.append(timed(name))
        runs.append(timed(reference))
    done = [ms for ms in runs if ms is not None]
    out[reference].ms.append(statistics.median(done) if done else None)


SYNC_ORDERS = ("blocks", "interleaved")
FLOOR_BURSTS = ("between", "once")
PHASES = ("fwd", "fb")


def parse_phases(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """--phases: a comma-separated selection of PHASES ("both": all of them); anything
    else is an argument error, not a run that measures nothing."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if items == ["both"]:
        return list(PHASES)
    unknown = [x for x in items if x not in PHASES]
    if unknown or not items:
        parser.error(f"--phases: {unknown or text!r} not among {', '.join(PHASES)} (give "
                     f"e.g. fwd,fb, fwd, fb or both)")
    return [x for x in PHASES if x in items]


def synchronized(fns: dict, inputs, rounds: int, reference: str, *, clocks=None,
                 cuda: bool = True, log=print, calls: int | None = None,
                 order: str = "blocks", bracket: bool = False) -> tuple[dict, dict]:
    """The other protocol, beside the bursts: each fn as single synchronized calls (the
    host's time shows), ``calls`` of them (default ``4 x rounds``), no heat-up (the bursts
    ran first). Returns (name -> Timing, name -> paired ratio to ``reference``).

    ``order``: "blocks" (the default): in each of ``rounds`` rounds (the methods' order
    rotated) a method makes one untimed single call, then its share of ``calls`` timed
    ones, whose median is its figure for the round. "interleaved": one method's call,
    then the next's, each call a round. Why blocks: on a power-capped H200 a single
    call's clock depends on what ran just before it (docs/BENCHMARKS.md, pass 7: at 8192
    tokens a GEMM after a fused-op call took 14.42 ms and the fused op after a GEMM 15.30,
    1.061x; each after itself 15.05 and 15.05, 1.000x), so interleaving gives each method
    a different predecessor; in blocks every method follows itself. A single call's ratio
    spreads by +-5%: more calls narrow the median. ``bracket`` (blocks only; the
    interleaved order ignores it): the reference's block runs before every other method's
    and after the last, its figure for the round the median of those blocks
    (``bracketed``)."""
    if order not in SYNC_ORDERS:
        raise ValueError(f"order must be one of {SYNC_ORDERS}, got {order!r}")
    calls = calls or 4 * rounds
    if order == "interleaved":
        got = interleaved(fns, inputs, calls, heat_s=0, single=True, clocks=clocks,
                          log=log, cuda=cuda)
        return got, paired_ratios(got, reference)
    per_block = max(1, math.ceil(calls / rounds))
    got = {name: Timing(name) for name in fns}
    live = list(fns)
    for r in range(rounds if live else 0):

        def timed(name):  # a block's median; None where the method raised (now or before)
            fn, t = fns[name], got[name]
            if t.error:  # a reference that raised earlier in the round: not run again
                return None
            try:
                burst(fn, inputs, 1, r, cuda=cuda)  # untimed: the GPU's state after it
                t0 = time.perf_counter()
                # each call's host time too: its enqueue time with the GPU idle (a burst's
                # first calls queue behind a busy GPU: docs/BENCHMARKS.md, pass 31)
                block = [burst(fn, inputs, 1, r + i + 1, host=t.host_ms, cuda=cuda)
                         for i in range(per_block)]
            except Exception as e:  # as interleaved: recorded, the others go on
                t.error = f"{type(e).__name__}: {str(e)[:300]}"
                log(f"  {name} (sync): {t.error}")
                return None
            t1 = time.perf_counter()
            t.calls = per_block
            window = clocks.window(t0, t1) if clocks is not None else None
            if window is not None:
                t.sm_mhz.append(window[0])
                t.watts.append(window[1])
            return statistics.median(block)

        live = [name for name in live if not got[name].error]
        ref = reference if bracket and reference in live else None
        bracketed(rotated([name for name in live if name != ref], r), ref, timed, got)
        for name in live:  # a method that raised: no figures (a reference that raised
            if got[name].error:  # leaves the others none to be paired with)
                got[name].ms.clear()
    return got, paired_ratios(got, reference)


def paired_ratios(timings: dict, reference: str) -> dict:
    """name -> (median, min, max) over rounds of ms[name][r] / ms[reference][r]."""
    ref = timings.get(reference)
    if ref is None or not ref.ms:
        return {}
    out = {}
    for name, t in timings.items():
        if t.ms and len(t.ms) == len(ref.ms):
            per_round = [a / b for a, b in zip(t.ms, ref.ms)]
            out[name] = (statistics.median(per_round), min(per_round), max(per_round))
    return out


def summarize(t: Timing) -> dict:
    """The JSON fields of one Timing."""
    if t.error:
        return {"error": t.error}
    return {"ms": t.median_ms, "ms_rounds": [round(x, 3) for x in t.ms], "calls": t.calls,
            "sm_mhz": statistics.median(t.sm_mhz) if t.sm_mhz else None,
            "watts": statistics.median(t.watts) if t.watts else None,
            "host_ms": t.median_host_ms}


def timing_options(p: argparse.ArgumentParser, rounds: int = 7) -> None:
    """The options of tools/bench/timing.py's steady-state protocol."""
    p.add_argument("--rounds", "--repeats", type=int, default=rounds,
                   help="timed rounds (each times every method once)")
    p.add_argument("--burst-ms", type=float, default=300.0,
                   help="GPU work per timed burst of back-to-back calls")
    p.add_argument("--heat-s", type=float, default=2.0,
                   help="seconds of the first method before timing (steady power state)")
    p.add_argument("--sync-calls", type=int, default=None, metavar="N",
                   help="with --sync: single synchronized calls a method (default 4 x "
                        "--rounds; blocks order: rounded up to a multiple of --rounds, "
                        "each after one untimed call)")
    p.add_argument("--floor-bursts", choices=FLOOR_BURSTS, default="between",
                   help="the floor's bursts (--sync: blocks) in a round: before every "
                        "method's and after the last, its round's figure their median "
                        "(between, the default), or one in the rotation (once, the "
                        "protocol through pass 19); --sync-order interleaved: single calls "
                        "never bracketed")
    p.add_argument("--sync-order", choices=SYNC_ORDERS, default="blocks",
                   help="with --sync: each method's single calls in blocks, one block a "
                        "round after an untimed call (default), or interleaved call by call "
                        "(the protocol before 2026-12-04)")
