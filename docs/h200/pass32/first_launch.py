"""Pass 32: what a small call's host does before its first kernel launch, on a GPU host.

Pass 31 (r3, sync_timeline.py) timed a synchronized 256-token top-k call's host to its
first launch at 92.5 us (k = 8) and 94.7 (k = 32) against the log-prob op's 56.2 and
top-k k = 1's 62.0; profiled, the top-k's first allocation came 79 us after the call
against the log-prob op's 45. On the CPU machine (docs/cpu/host_stubbed.py, launches
stubbed) the two paths cost the same, so the difference is the GPU host's.

Here every kernels module's ``launch`` raises at its first call, so each call runs its
host path up to its first launch and no kernel ever runs (the GPU idle). For each op at
N = 256 (H = 4096, V = 151936, bf16, T = 0.7; host_ab.py's calls): the median host time
to that point over CALLS calls (us), then cProfile over CALLS calls: the functions by own
time and by inclusive time, us a call (the profiler's own time included). Then the same
host time with the GPU busy (each 10 calls after enqueueing a ~15 ms GEMM), beside
two primitives timed both ways: a 256 x 594 fp32 ``torch.empty`` on the GPU and pure
Python (``sum(range(200))``): pass 31 found every launch and allocation, the bare GEMM's
too, 2-4x dearer behind a busy GPU; this says whether plain Python is too.

    PYTHONPATH=. python docs/h200/pass32/first_launch.py OUT.txt      (one GPU)

($FL_CALLS, default 300; $FL_OPS, default logprob,topk1,topk8,topk32,at8.)
"""
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pass28"))
from host_ab import op_calls  # noqa: E402

from megatron_overlay import ops  # noqa: E402
from megatron_overlay.ops.kernels import triton_impl, triton_topk  # noqa: E402,F401
from tools.bench.inputs import distill_inputs  # noqa: E402

CALLS = int(os.environ.get("FL_CALLS", 300))
OPS = os.environ.get("FL_OPS", "logprob,topk1,topk8,topk32,at8").split(",")
TOP = 30


class FirstLaunch(Exception):
    pass


def stop_at_first_launch():
    def stop(*args, **kwargs):
        raise FirstLaunch
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron_overlay.ops.kernels.") and hasattr(module, "launch"):
            module.launch = stop


def to_first_launch(fn):
    try:
        fn()
    except FirstLaunch:
        return
    raise RuntimeError("the call returned without launching a kernel")


def busy_times(fn, gemm, rounds):
    """us a call of ``fn`` with the GPU busy: 10 calls after each enqueued GEMM."""
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        gemm()
        for _ in range(10):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return times


def idle_times(fn, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def main():
    out = open(sys.argv[1], "w")

    def say(text):
        print(text, flush=True)
        out.write(text + "\n")

    h, w, ids = distill_inputs(256, 4096, 151936, 32, 0)
    calls = op_calls(ops, h, w, ids)
    for name in OPS:  # compiled and cached with real launches first
        for _ in range(3):
            calls[name]()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    stop_at_first_launch()
    for name in OPS:
        fn = calls[name]
        for _ in range(20):
            to_first_launch(fn)
        times = []
        for _ in range(CALLS):
            t0 = time.perf_counter()
            to_first_launch(fn)
            times.append((time.perf_counter() - t0) * 1e6)
        say(f"== {name}: host to the first launch {statistics.median(times):.1f} us "
            f"(median of {CALLS}; min {min(times):.1f})")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(CALLS):
            to_first_launch(fn)
        prof.disable()
        rows = list(pstats.Stats(prof).stats.items())
        for label, column in (("own", 2), ("inclusive", 3)):
            say(f"-- {name}: by {label} time; own us / inclusive us / calls, a call")
            for (path, line, func), (_, n_calls, own, incl, _) in sorted(
                    rows, key=lambda kv: -kv[1][column])[:TOP]:
                say(f"  {own / CALLS * 1e6:7.2f} {incl / CALLS * 1e6:8.2f} "
                    f"{n_calls / CALLS:5.1f} {os.path.basename(path)}:{line}({func})")
    if not torch.cuda.is_available():
        return
    big = torch.randn(8192, 4096, device="cuda").bfloat16()
    gemm = lambda: big @ w.T  # noqa: E731  (~15 ms on an H100)
    primitives = {"torch.empty 256 x 594 fp32 (cuda)":
                  lambda: torch.empty(594, 256, device=h.device),
                  "sum(range(200))": lambda: sum(range(200))}
    for name in OPS:
        primitives[name + " to the first launch"] = lambda fn=calls[name]: to_first_launch(fn)
    for name, fn in primitives.items():
        idle = statistics.median(idle_times(fn, CALLS))
        busy = statistics.median(busy_times(fn, gemm, CALLS // 10))
        say(f"== idle / busy: {name}: {idle:.2f} / {busy:.2f} us (medians)")


if __name__ == "__main__":
    main()
