"""Host probe (issue 20, pass 4), ours against a baseline package in the same process:
(warm) a call's enqueue time in steady bursts of 40 behind queued GEMMs; (cold) the
enqueue time of single calls, each after a sync and ~60 ms of queued GEMMs (the issue's
protocol); then a cProfile of ours' log-prob forward."""
import cProfile
import importlib
import io
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, sys.argv[1])  # DIR holding megatron_overlay_base
base_ops = importlib.import_module("megatron_overlay_base.ops")
from megatron_overlay import ops  # noqa: E402

T = 0.7
pc = time.perf_counter


def inputs(n, hd=4096, v=151936):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, hd, device="cuda", generator=g) * (4 / hd ** 0.5)).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    ids = torch.randint(0, v, (n, 8), device="cuda", generator=g)
    return h, w, y, ids


def fns(m, x):
    h, w, y, ids = x
    hg = h.detach().requires_grad_()

    def lp():
        with torch.no_grad():
            return m.linear_logprob_entropy(h, w, y, temperature=T)

    def lpg():
        lp_, ent = m.linear_logprob_entropy(hg, w, y, temperature=T)
        (lp_.sum() + ent.sum()).backward()

    def at():
        with torch.no_grad():
            return m.linear_logprobs_at(h, w, ids, temperature=T)

    def tk(k):
        def f():
            with torch.no_grad():
                return m.linear_topk_logprobs(h, w, k, temperature=T)
        return f
    return {"logprob": lp, "logprob_fwdbwd": lpg, "at8": at, "topk8": tk(8), "topk32": tk(32)}


def busy(w, big, n):
    for _ in range(n):
        big @ w.T


def warm(f, w, big, calls):
    busy(w, big, 6)
    t0 = pc()
    for _ in range(calls):
        f()
    dt = (pc() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return dt


def cold(f, w, big, calls=20):
    per = []
    for _ in range(calls):
        busy(w, big, 4)
        t0 = pc()
        f()
        per.append((pc() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def main():
    print(torch.__version__, torch.cuda.get_device_name())
    for n in (256, 8192):
        x = inputs(n)
        big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
        ours, base = fns(ops, x), fns(base_ops, x)
        print(f"== N={n}: host us a call, ours / base (medians of 5 rounds, interleaved)")
        for name in ours:
            for f in (ours[name], base[name]):
                for _ in range(3):
                    f()
            torch.cuda.synchronize()
            calls = 10 if (n > 256 and name == "logprob_fwdbwd") else 40
            r = {"ours_w": [], "base_w": [], "ours_c": [], "base_c": []}
            for _ in range(5):
                r["ours_w"].append(warm(ours[name], x[1], big, calls))
                r["base_w"].append(warm(base[name], x[1], big, calls))
                r["ours_c"].append(cold(ours[name], x[1], big, 6))
                r["base_c"].append(cold(base[name], x[1], big, 6))
            med = {k: statistics.median(v) for k, v in r.items()}
            print(f"  {name:15s} warm {med['ours_w']:7.1f} / {med['base_w']:7.1f}   "
                  f"cold {med['ours_c']:7.1f} / {med['base_c']:7.1f}")
        del x, big
        torch.cuda.empty_cache()
    x = inputs(256)
    big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    f = fns(ops, x)["logprob"]
    busy(x[1], big, 6)
    p = cProfile.Profile()
    p.enable()
    for _ in range(40):
        f()
    p.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(45)
    print("-- cProfile ours logprob N=256 (40 calls), by tottime")
    print("\n".join(s.getvalue().splitlines()[4:55]))


main()
