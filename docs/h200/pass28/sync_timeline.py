"""Pass 28: where a synchronized small call's time goes, on the GPU's own clock.

Issue 20 asks a synchronized 256-token forward to take <= 1.3x the bare GEMM; top-k at
k = 8 and 32 took 1.45x and 1.6x (pass 27). A synchronized call's time is the host's
time to its first launch (the GPU idle), then the kernels and the gaps between them (a
gap where the host had not yet launched the next kernel, or the launch's own latency).
For each op at N tokens (H = 4096, V = 151936, bf16, T = 0.7): the GEMM, the log-prob
forward, top-k at k = 1 / 8 / 32, at ids (k = 8), and the fwd+bwd of the log-prob op
and of at ids (loss: the sum of the outputs):

1. no profiler, CALLS synchronized calls, medians (us): the host's time to the op's first
   Triton launch (every kernels module's ``launch`` wrapped), to the call's return, and
   the whole call to the sync's return; the GEMM's whole call beside it.
2. torch.profiler (CPU and CUDA), PROF_CALLS synchronized calls, each in a
   ``record_function`` range; medians over the calls (us): the GPU idle from the range's
   start to its first kernel, the last kernel's end, the host's return; for each kernel
   (and memset / copy) in order its time, the gap before it, and its start after its
   launch API call's start (a few us: the GPU waited for that launch; more: it was
   queued). The profiler adds host time of its own (its records): the host figures of
   part 1 are the ones to quote. One call's CPU ops before its first kernel launch are
   listed as the profiler saw them.

    PYTHONPATH=. python docs/h200/pass28/sync_timeline.py OUT.json     (one GPU)

($TL_N: token counts, default 256; $TL_CALLS, default 30; $TL_PROF_CALLS, default 12;
$TL_OPS: a comma list of the op names below, default all. r1 and r3 ran the copy of the
ops' calls this script had then, cef06e5's; host_ab.py's are the same calls.)
"""
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.dirname(__file__))
import host_ab  # noqa: E402  (the ops' calls, the first launch's timer)

from megatron_overlay import ops  # noqa: E402
from tools.bench.inputs import distill_inputs  # noqa: E402

H, V, T = 4096, 151936, 0.7
TOKENS = [int(n) for n in os.environ.get("TL_N", "256").split(",")]
CALLS = int(os.environ.get("TL_CALLS", 30))
PROF_CALLS = int(os.environ.get("TL_PROF_CALLS", 12))
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


# the ops of r1 (r3: $TL_OPS), host_ab.op_calls' fwd / fwd+bwd calls and the GEMM
DEFAULT_OPS = "gemm,logprob,topk1,topk8,topk32,at8,logprob_fb,at8_fb"


def op_calls(h, w, ids):
    """name -> a zero-argument call: the GEMM and host_ab.op_calls' (forward ones under
    no_grad), those of $TL_OPS."""
    calls = {"gemm": lambda: h @ w.T, **host_ab.op_calls(ops, h, w, ids)}
    return {name: calls[name] for name in os.environ.get("TL_OPS", DEFAULT_OPS).split(",")}


def plain(fn):
    """Part 1: medians over CALLS synchronized calls, us."""
    first, ret, whole = [], [], []
    for _ in range(CALLS):
        torch.cuda.synchronize()
        host_ab._first[0] = None
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if host_ab._first[0] is not None:
            first.append((host_ab._first[0] - t0) * 1e6)
        ret.append((t1 - t0) * 1e6)
        whole.append((t2 - t0) * 1e6)
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return {"first_launch_us": med(first), "host_us": med(ret), "sync_us": med(whole)}


def traced(fn):
    """Part 2: the profiler's timeline of PROF_CALLS synchronized calls."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(PROF_CALLS):
            torch.cuda.synchronize()
            with record_function("timed_call"):
                fn()
            torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        return summarize(json.load(open(f.name))["traceEvents"])


def summarize(events):
    """traced()'s figures from a chrome trace's events."""
    xs = [e for e in events if e.get("ph") == "X"]
    calls = sorted((e for e in xs if e.get("cat") == "user_annotation"
                    and e["name"] == "timed_call"), key=lambda e: e["ts"])
    api = {e["args"]["correlation"]: e for e in xs
           if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in xs if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    per_call, cpu_before = [], None
    for i, c in enumerate(calls):
        t0, t_end = c["ts"], c["ts"] + c["dur"]
        launched = [g for g in gpu if (a := api.get(g.get("args", {}).get("correlation")))
                    and t0 <= a["ts"] <= t_end]
        if not launched:
            continue
        kernels, prev = [], t0
        for g in launched:
            a = api[g["args"]["correlation"]]
            kernels.append({"name": g["name"][:60], "us": g["dur"], "gap_us": g["ts"] - prev,
                            "after_launch_us": g["ts"] - a["ts"]})
            prev = g["ts"] + g["dur"]
        per_call.append({"idle_before_us": launched[0]["ts"] - t0,
                         "gpu_end_us": prev - t0, "host_return_us": c["dur"],
                         "kernels": kernels})
        if i == len(calls) // 2:
            first_api = api[launched[0]["args"]["correlation"]]["ts"]
            cpu_before = [(e["name"][:50], round(e["dur"], 1), round(e["ts"] - t0, 1))
                          for e in xs if e.get("cat") == "cpu_op"
                          and t0 <= e["ts"] < first_api]
    if not per_call:
        return {"calls": 0}
    med = statistics.median
    shapes = {len(c["kernels"]) for c in per_call}
    n_kernels = max(shapes, key=lambda n: sum(len(c["kernels"]) == n for c in per_call))
    same = [c for c in per_call if len(c["kernels"]) == n_kernels]
    return {
        "calls": len(per_call), "kernel_counts": sorted(shapes),
        "idle_before_us": med(c["idle_before_us"] for c in per_call),
        "gpu_end_us": med(c["gpu_end_us"] for c in per_call),
        "host_return_us": med(c["host_return_us"] for c in per_call),
        "kernels": [{"name": same[0]["kernels"][j]["name"],
                     **{key: med(c["kernels"][j][key] for c in same)
                        for key in ("us", "gap_us", "after_launch_us")}}
                    for j in range(n_kernels)],
        "cpu_ops_before_first_launch": cpu_before,
    }


def main():
    out_path = sys.argv[1]
    host_ab.wrap_launches()
    rows = []
    for n in TOKENS:
        h, w, ids = distill_inputs(n, H, V, 32, 0)
        for name, fn in op_calls(h, w, ids).items():
            for _ in range(10):
                fn()
            row = {"N": n, "op": name, **plain(fn)}
            row["profile"] = traced(fn)
            rows.append(row)
            p = row["profile"]
            first = row["first_launch_us"]
            if not p["calls"]:
                print(f"N={n} {name}: no kernels traced", flush=True)
                continue
            print(f"N={n} {name}: sync {row['sync_us']:.1f} us, host return "
                  f"{row['host_us']:.1f}, first launch "
                  f"{'-' if first is None else f'{first:.1f}'}; profiled: idle before "
                  f"{p['idle_before_us']:.1f}, GPU end {p['gpu_end_us']:.1f}, host return "
                  f"{p['host_return_us']:.1f}", flush=True)
            for kern in p["kernels"]:
                print(f"    {kern['us']:8.1f} us  gap {kern['gap_us']:7.1f}  after launch "
                      f"{kern['after_launch_us']:7.1f}  {kern['name']}", flush=True)
            json.dump(rows, open(out_path, "w"), indent=1)
    g = None
    for row in rows:
        if row["op"] == "gemm":
            g = row["sync_us"]
        if g is None:
            continue
        print(f"N={row['N']} {row['op']}: sync {row['sync_us'] / g:.3f} x the GEMM's "
              f"{g:.1f} us", flush=True)


if __name__ == "__main__":
    main()
