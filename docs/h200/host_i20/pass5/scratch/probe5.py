"""Host probe (issue 20, pass 5): where forward+backward's and top-k's host time goes at
N = 256, steady state (bursts behind queued GEMMs): enqueue time of the pieces, cProfile,
and the aten ops a call issues (torch.profiler, CPU side)."""
import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

from megatron_overlay import ops

T = 0.7
pc = time.perf_counter
N = int(sys.argv[1]) if len(sys.argv) > 1 else 256


def inputs(n, hd=4096, v=151936):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, hd, device="cuda", generator=g) * (4 / hd ** 0.5)).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    return h, w, y


h, w, y = inputs(N)
big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
hg, wg = h.detach().requires_grad_(), w.detach().requires_grad_()


def busy(n):
    for _ in range(n):
        big @ w.T


def fwd_nograd():
    with torch.no_grad():
        return ops.linear_logprob_entropy(h, w, y, temperature=T)


def fwd_grad():
    return ops.linear_logprob_entropy(hg, wg, y, temperature=T)


def fwdbwd():
    lp, ent = fwd_grad()
    (lp.sum() + ent.sum()).backward()


def fwdbwd_h():  # weight frozen
    lp, ent = ops.linear_logprob_entropy(hg, w, y, temperature=T)
    (lp.sum() + ent.sum()).backward()


def topk(k):
    def f():
        with torch.no_grad():
            return ops.linear_topk_logprobs(h, w, k, temperature=T)
    return f


def warm(f, calls=20):
    busy(8)
    t0 = pc()
    for _ in range(calls):
        f()
    dt = (pc() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return dt


def split_bwd(calls=20):
    """enqueue of forward-with-grad and of backward() separately."""
    busy(8)
    tf = tb = 0.0
    for _ in range(calls):
        t0 = pc()
        lp, ent = fwd_grad()
        loss = lp.sum() + ent.sum()
        t1 = pc()
        loss.backward()
        t2 = pc()
        tf += t1 - t0
        tb += t2 - t1
    torch.cuda.synchronize()
    return tf / calls * 1e6, tb / calls * 1e6


def prof(f, calls=30, n=40):
    busy(8)
    p = cProfile.Profile()
    p.enable()
    for _ in range(calls):
        f()
    p.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(n)
    return "\n".join(s.getvalue().splitlines()[4:n + 10])


def aten(f, calls=5):
    from torch.profiler import profile, ProfilerActivity
    busy(8)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(calls):
            f()
    torch.cuda.synchronize()
    return p.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)


print(torch.__version__, torch.cuda.get_device_name(), "N", N)
funcs = {"fwd_nograd": fwd_nograd, "fwd_grad": fwd_grad, "fwdbwd": fwdbwd,
         "fwdbwd_h": fwdbwd_h, "topk8": topk(8), "topk32": topk(32)}
for f in funcs.values():
    for _ in range(3):
        f()
torch.cuda.synchronize()
print("== warm enqueue, us a call (median of 5 bursts of 20)")
for name, f in funcs.items():
    print(f"  {name:12s} {statistics.median(warm(f) for _ in range(5)):8.1f}")
sp = [split_bwd() for _ in range(5)]
print(f"  fwd(grad) part {statistics.median(a for a, _ in sp):8.1f}  backward() part "
      f"{statistics.median(b for _, b in sp):8.1f}")
for name in ("fwdbwd", "topk8", "topk32"):
    print(f"-- cProfile {name} (30 calls), by tottime")
    print(prof(funcs[name]))
for name in ("fwdbwd", "topk8"):
    print(f"-- aten ops {name} (5 calls)")
    print(aten(funcs[name]))
