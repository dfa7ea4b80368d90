"""Is the GEMM's single-call speed-up (pass 7) the clock? SM clock and board power (NVML,
sampled every 2 ms: tools/bench/clocks.py) during single synchronized calls and during
bursts, for the bare GEMM and the log-prob forward; ms x MHz is the call's length in
(median) clock cycles. Usage: python clocks_probe.py N [N ...]   (H = 4096, V = 151936)"""
import statistics, sys, time
import torch
from megatron_overlay import ops
from tools.bench.clocks import ClockSampler
from tools.bench.inputs import distill_inputs

H, V, T = 4096, 151936, 0.7
med = statistics.median
for n in [int(x) for x in sys.argv[1:]]:
    h, w, ids = distill_inputs(n, H, V, 1, 0)
    h2 = torch.randn_like(h)
    y = ids[:, 0].contiguous()
    fns = {"gemm": lambda x: torch.matmul(x, w.T),
           "logprob": lambda x: ops.linear_logprob_entropy(x, w, y, temperature=T)}
    with torch.no_grad(), ClockSampler() as clk:
        for fn in fns.values():
            fn(h); fn(h2)
        torch.cuda.synchronize()
        one = {}
        for m, fn in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(h); e.record(); e.synchronize(); one[m] = s.elapsed_time(e)
        calls = max(3, int(300 / one["gemm"]))
        rows = []
        for mode in ("single, alternating", "single, one method", "bursts"):
            got = {m: [] for m in fns}
            order = [(r, m) for r in range(24) for m in fns] if mode.startswith("single, alt") \
                else [(r, m) for m in fns for r in range(24 if mode.startswith("single") else 3)]
            for r, m in order:
                fn = fns[m]
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                k = 1 if mode.startswith("single") else calls
                t0 = time.perf_counter(); s.record()
                for i in range(k):
                    fn(h if (r + i) % 2 else h2)
                e.record(); e.synchronize(); t1 = time.perf_counter()
                c = clk.window(t0, t1) or (float("nan"), float("nan"))
                got[m].append((s.elapsed_time(e) / k, c[0], c[1]))
            for m, v in got.items():
                ms, mhz, watts = med(x[0] for x in v), med(x[1] for x in v), med(x[2] for x in v)
                rows.append((mode, m, ms, mhz, watts))
    print(f"== N = {n}: ms a call, SM MHz and W (medians; NVML every 2 ms), kcycles = ms x MHz")
    for mode, m, ms, mhz, watts in rows:
        print(f"  {mode:20s} {m:8s} {ms:8.3f} ms  {mhz:6.0f} MHz  {watts:5.0f} W  "
              f"{ms * mhz:9.0f} kcycles")
    sys.stdout.flush()
