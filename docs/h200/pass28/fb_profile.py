"""Pass 28: where a small forward+backward call's host time goes, on a GPU host.

Each op at N = 256 (H = 4096, V = 151936, bf16, T = 0.7; the loss the sum of the outputs,
as the one-run table's): BURSTS bursts of 10 calls, a sync after each; cProfile on for the
calls only (not the syncs): the functions by own time, us a call; then torch.profiler
(CPU only) over one burst: the torch ops by self CPU time, us a call, and their counts.
The profilers add their own time: the ranks and the counts are the figures to read.

    PYTHONPATH=. python docs/h200/pass28/fb_profile.py OUT.txt      (one GPU)
"""
import cProfile
import io
import os
import pstats
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(__file__))
from host_ab import op_calls  # noqa: E402

from megatron_overlay import ops  # noqa: E402
from tools.bench.inputs import distill_inputs  # noqa: E402

BURSTS, CALLS, TOP = 5, 10, 40


def main():
    out = open(sys.argv[1], "w")

    def say(text):
        print(text, flush=True)
        out.write(text + "\n")

    h, w, ids = distill_inputs(256, 4096, 151936, 32, 0)
    calls = op_calls(ops, h, w, ids)
    for name in ("logprob_fb", "at8_fb", "topk8_fb", "logprob", "topk8"):
        fn = calls[name]
        for _ in range(5):
            fn()
        prof = cProfile.Profile()
        for _ in range(BURSTS):
            torch.cuda.synchronize()
            prof.enable()
            for _ in range(CALLS):
                fn()
            prof.disable()
        torch.cuda.synchronize()
        n = BURSTS * CALLS
        rows = sorted(pstats.Stats(prof, stream=io.StringIO()).stats.items(),
                      key=lambda kv: -kv[1][2])
        say(f"== {name}: cProfile, own us / inclusive us / calls, a call")
        for (path, line, func), (_, count, own, incl, _) in rows[:TOP]:
            say(f"  {own / n * 1e6:7.2f} {incl / n * 1e6:8.2f} {count / n:5.1f} "
                f"{os.path.basename(path)}:{line}({func})")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as tp:
            for _ in range(CALLS):
                fn()
        torch.cuda.synchronize()
        say(f"== {name}: torch ops by self CPU time, us a call / count a call")
        events = sorted(tp.key_averages(), key=lambda e: -e.self_cpu_time_total)
        for e in events[:25]:
            say(f"  {e.self_cpu_time_total / CALLS:7.2f} {e.count / CALLS:5.1f} {e.key}")


if __name__ == "__main__":
    main()
