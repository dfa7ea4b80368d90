"""Host probe (issue 20, pass 5): forward+backward ours against a baseline package in the
same process, warm (bursts behind queued GEMMs) and cold (single calls after a sync), and
the GPU time of one synchronized call; with a trainable and a frozen head."""
import importlib
import statistics
import sys
import time

import torch

sys.path.insert(0, sys.argv[1])
base_ops = importlib.import_module("megatron_overlay_base.ops")
from megatron_overlay import ops  # noqa: E402

T = 0.7
pc = time.perf_counter


def inputs(n, hd=4096, v=151936):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, hd, device="cuda", generator=g) * (4 / hd ** 0.5)).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    return h, w, y


def fns(m, x):
    h, w, y = x

    def fb(frozen):
        def f():
            hg = h.detach().requires_grad_()
            wg = w.detach().requires_grad_(not frozen)
            lp, ent = m.linear_logprob_entropy(hg, wg, y, temperature=T)
            (lp.sum() + ent.sum()).backward()
        return f

    def fwd():
        with torch.no_grad():
            return m.linear_logprob_entropy(h, w, y, temperature=T)
    return {"fwd": fwd, "fwd+bwd": fb(False), "fwd+bwd frozen head": fb(True)}


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


def cold(f, w, big, calls):
    per = []
    for _ in range(calls):
        busy(w, big, 4)
        t0 = pc()
        f()
        per.append((pc() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def gpu_ms(f, calls=5):
    per = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = pc()
        f()
        torch.cuda.synchronize()
        per.append((pc() - t0) * 1e3)
    return statistics.median(per)


def main():
    print(torch.__version__, torch.cuda.get_device_name())
    for n in (256, 8192):
        x = inputs(n)
        big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
        ours, base = fns(ops, x), fns(base_ops, x)
        print(f"== N={n}: host us a call, ours / base (medians of 5 interleaved rounds); "
              f"synchronized call ms ours / base")
        for name in ours:
            for f in (ours[name], base[name]):
                for _ in range(3):
                    f()
            torch.cuda.synchronize()
            calls = 8 if n > 256 and name != "fwd" else 30
            r = {"ow": [], "bw": [], "oc": [], "bc": [], "os": [], "bs": []}
            for _ in range(5):
                r["ow"].append(warm(ours[name], x[1], big, calls))
                r["bw"].append(warm(base[name], x[1], big, calls))
                r["oc"].append(cold(ours[name], x[1], big, 5))
                r["bc"].append(cold(base[name], x[1], big, 5))
                r["os"].append(gpu_ms(ours[name], 3))
                r["bs"].append(gpu_ms(base[name], 3))
            m = {k: statistics.median(v) for k, v in r.items()}
            print(f"  {name:20s} warm {m['ow']:7.1f} / {m['bw']:7.1f}   cold {m['oc']:7.1f} / "
                  f"{m['bc']:7.1f}   sync {m['os']:7.3f} / {m['bs']:7.3f} ms")
        del x, big
        torch.cuda.empty_cache()


main()
