"""Host probe (issue 20, pass 4): steady-state burst host time per op call, a cProfile of
it, and the cost of each piece of one Triton launch (Triton 3.6) on the real kernels."""
import cProfile
import io
import pstats
import sys
import time

import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import finalize_stats, logprob_forward

T = 0.7
pc = time.perf_counter


def inputs(n, hd=4096, v=151936):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, hd, device="cuda", generator=g) * (4 / hd ** 0.5)).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    ids = torch.randint(0, v, (n, 8), device="cuda", generator=g)
    return h, w, y, ids


def fns(x):
    h, w, y, ids = x
    hg = h.detach().requires_grad_()

    def lp():
        with torch.no_grad():
            return ops.linear_logprob_entropy(h, w, y, temperature=T)

    def lpg():
        lp_, ent = ops.linear_logprob_entropy(hg, w, y, temperature=T)
        (lp_.sum() + ent.sum()).backward()

    def at():
        with torch.no_grad():
            return ops.linear_logprobs_at(h, w, ids, temperature=T)

    def tk(k):
        def f():
            with torch.no_grad():
                return ops.linear_topk_logprobs(h, w, k, temperature=T)
        return f
    return {"gemm": lambda: h @ w.T, "logprob": lp, "logprob_fwdbwd": lpg, "at8": at,
            "topk8": tk(8), "topk32": tk(32)}


def busy(w, big, n=6):
    for _ in range(n):
        big @ w.T


def burst(name, f, w, big, calls, prof=False):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    busy(w, big)
    p = cProfile.Profile() if prof else None
    if p:
        p.enable()
    t0 = pc()
    for _ in range(calls):
        f()
    dt = (pc() - t0) / calls * 1e6
    if p:
        p.disable()
    torch.cuda.synchronize()
    return dt, p


def part_burst(n, calls=40):
    x = inputs(n)
    big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    print(f"== burst host us/call, N={n} ({calls} calls behind ~6 queued 8192-row GEMMs)")
    for name, f in fns(x).items():
        if n > 256 and name in ("logprob_fwdbwd",):
            calls_ = 10
        else:
            calls_ = calls
        ts = [burst(name, f, x[1], big, calls_)[0] for _ in range(5)]
        print(f"  {name:16s} min {min(ts):7.1f}  median {sorted(ts)[2]:7.1f}")
    for name in ("logprob", "at8", "topk8", "logprob_fwdbwd"):
        _, p = burst(name, fns(x)[name], x[1], big, 20, prof=True)
        s = io.StringIO()
        pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(28)
        print(f"-- cProfile {name} N={n} (20 calls), by tottime")
        print("\n".join(s.getvalue().splitlines()[6:40]))


def part_launch():
    """One forward_stats_kernel / finalize_kernel launch at N = 256, by piece."""
    from triton.runtime import driver
    from triton.runtime import jit as J
    from triton import knobs
    from triton.tools.tensor_descriptor import TensorDescriptor
    x = inputs(256)
    big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    seen = {}
    orig = J.JITFunction.run

    def spy(self, *args, grid, warmup, **kwargs):
        seen.setdefault(self.__name__, (self, args, dict(kwargs), grid))
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
    J.JITFunction.run = spy
    fns(x)["logprob"]()
    J.JITFunction.run = orig
    torch.cuda.synchronize()
    dev = driver.active.get_current_device()
    print("== one launch, by piece (us, 200 reps behind a busy GPU)")
    for kname in ("forward_stats_kernel", "finalize_kernel"):
        fn, args, kwargs, grid = seen[kname]
        kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        kc, kkc, target, backend, binder = fn.device_caches[dev]
        bound, spec, opts = binder(*args, **kwargs)
        key = J.compute_cache_key(kkc, spec, opts)
        kern = kc[key]
        vals = list(bound.values())
        stream = driver.active.get_current_stream(dev)
        descs = [i for i, a in enumerate(vals) if isinstance(a, TensorDescriptor)]

        def fresh():
            v = list(vals)
            for i in descs:
                d = v[i]
                v[i] = TensorDescriptor(d.base, d.shape, d.strides, d.block_shape)
            return v
        reps = 200
        cases = {
            "full fn[grid](...)": lambda: fn[grid](*args, **{k: v for k, v in kwargs.items()
                                                            if k not in ("debug", "instrumentation_mode")}),
            "get_current_device+stream": lambda: driver.active.get_current_stream(driver.active.get_current_device()),
            "torch current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
            "binder": lambda: binder(*args, **kwargs),
            "compute_cache_key": lambda: J.compute_cache_key(kkc, spec, opts),
            "TensorDescriptor.from_tensor x n": lambda: [TensorDescriptor.from_tensor(vals[i].base, vals[i].block_shape) for i in descs],
            "kernel.run (same descs)": lambda: kern.run(grid[0], 1, 1, stream, kern.function, kern.packed_metadata, None, None, None, *vals),
            "kernel.run (fresh descs)": lambda: kern.run(grid[0], 1, 1, stream, kern.function, kern.packed_metadata, None, None, None, *fresh()),
            "torch.empty(256,4) cuda": lambda: torch.empty(256, 4, device="cuda"),
            "torch.empty(2,256) cuda dtype": lambda: torch.empty(2, 256, dtype=torch.float32, device=x[0].device),
            "is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
            "torch.cuda.is_available": torch.cuda.is_available,
            "event.query": (lambda e: (lambda: e.query()))(torch.cuda.Event()),
        }
        print(f" {kname}: grid {grid}, {len(vals)} args, {len(descs)} descriptors")
        for label, f in cases.items():
            f()
            busy(x[1], big, 3)
            t0 = pc()
            for _ in range(reps):
                f()
            dt = (pc() - t0) / reps * 1e6
            torch.cuda.synchronize()
            print(f"   {dt:8.2f}  {label}")


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name())
    which = sys.argv[1:] or ["launch", "256", "8192"]
    if "launch" in which:
        part_launch()
    for n in (256, 8192):
        if str(n) in which:
            part_burst(n)
