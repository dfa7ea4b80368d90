"""GPU probe (issue 20): (A) every kernel of one call in steady state, by torch.profiler,
beside the GEMM; (B) the host's enqueue time of one call split by stage and, inside each
Triton launch, by the phases of JITFunction.run (Triton 3.6), behind a busy GPU."""
import collections
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from megatron_overlay import ops
from megatron_overlay.ops import label_check, linear_logprob, linear_logprobs_at, linear_topk
from megatron_overlay.ops.kernels import triton_impl, triton_topk
from tools.bench.inputs import distill_inputs

T = 0.7
pc = time.perf_counter


def gemm(h, w, *_):
    return h @ w.T


def lp(h, w, y, _ids):
    with torch.no_grad():
        return ops.linear_logprob_entropy(h, w, y, temperature=T)


def at(h, w, _y, ids):
    with torch.no_grad():
        return ops.linear_logprobs_at(h, w, ids, temperature=T)


def topk(k):
    def run(h, w, _y, _ids):
        with torch.no_grad():
            return ops.linear_topk_logprobs(h, w, k, temperature=T)
    return run


def inputs(n, hd, v):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, hd, device="cuda", generator=g) * (4 / hd ** 0.5)).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    ids = torch.randint(0, v, (n, 8), device="cuda", generator=g)
    return h, w, y, ids


def part_a():
    print("== A: kernels of one call, steady state (torch.profiler, 4 calls after 3 s heat)")
    for n, hd, v in [(8192, 4096, 151936), (32768, 4096, 151936)]:
        x = inputs(n, hd, v)
        fns = {"gemm": gemm, "logprob": lp, "at8": at, "topk8": topk(8), "topk32": topk(32)}
        only = os.environ.get("PROBE_FNS")
        fns = {k: f for k, f in fns.items() if not only or k in only.split(",")}
        for name, fn in fns.items():
            fn(*x)
            torch.cuda.synchronize()
            t_end = pc() + 3
            while pc() < t_end:
                for _ in range(3):
                    fn(*x)
                torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(4):
                fn(*x)
            e.record()
            e.synchronize()
            wall = s.elapsed_time(e) / 4
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(4):
                    fn(*x)
                torch.cuda.synchronize()
            rows = sorted(((ev.device_time_total / 4000, ev.count / 4, ev.key)
                           for ev in p.key_averages() if ev.device_time_total > 0), reverse=True)
            tot = sum(r[0] for r in rows)
            print(f"N={n} {name}: burst {wall:.3f} ms/call, kernels sum {tot:.3f} ms, "
                  f"{sum(r[1] for r in rows):.0f} kernels/call")
            for ms, cnt, key in rows[:14]:
                print(f"    {ms:8.3f} ms  x{cnt:5.1f}  {key[:90]}")
        del x
        torch.cuda.empty_cache()


# ---- B: host phases
ACC = collections.defaultdict(float)
CNT = collections.Counter()


def timed(mod, name, label=None):
    f = getattr(mod, name)
    label = label or f"{mod.__name__.split('.')[-1]}.{name}"

    def wrapper(*a, **kw):
        t0 = pc()
        try:
            return f(*a, **kw)
        finally:
            ACC[label] += pc() - t0
            CNT[label] += 1
    setattr(mod, name, wrapper)


def patch_triton():
    from triton import knobs
    from triton.runtime import driver
    from triton.runtime import jit as J
    import triton.backends.nvidia.driver as nd
    orig_run = J.JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        t0 = pc()
        kwargs["debug"] = kwargs.get("debug", self.debug) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        device = driver.active.get_current_device()
        stream = driver.active.get_current_stream(device)
        t1 = pc()
        kernel_cache, kernel_key_cache, target, backend, binder = self.device_caches[device]
        bound_args, specialization, options = binder(*args, **kwargs)
        t2 = pc()
        key = J.compute_cache_key(kernel_key_cache, specialization, options)
        kernel = kernel_cache.get(key, None)
        t3 = pc()
        if kernel is None or warmup:
            return orig_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        grid = grid(bound_args) if callable(grid) else grid
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        meta = kernel.launch_metadata(grid, stream, *bound_args.values())
        t4 = pc()
        kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata, meta,
                   knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook,
                   *bound_args.values())
        t5 = pc()
        nm = self.__name__
        for ph, dt in (("stream", t1 - t0), ("bind", t2 - t1), ("key", t3 - t2),
                       ("meta", t4 - t3), ("launcher", t5 - t4)):
            ACC[f"triton.{ph}"] += dt
        ACC[f"kernel:{nm}"] += t5 - t0
        CNT[f"kernel:{nm}"] += 1
        CNT["triton.launches"] += 1
        return kernel
    J.JITFunction.run = run
    orig_desc = nd.make_tensordesc_arg

    def desc(arg, metadata):
        t0 = pc()
        try:
            return orig_desc(arg, metadata)
        finally:
            ACC["triton.launcher.tensordesc"] += pc() - t0
            CNT["triton.launcher.tensordesc"] += 1
    nd.make_tensordesc_arg = desc


def busy(w, h):
    """~60 ms of GEMMs ahead in the queue."""
    for _ in range(4):
        h @ w.T


def part_b(n, calls=30):
    hd, v = 4096, 151936
    x = inputs(n, hd, v)
    big = torch.randn(8192, hd, device="cuda", dtype=torch.bfloat16)
    fns = {"gemm": gemm, "logprob": lp, "at8": at, "topk8": topk(8), "topk32": topk(32)}
    print(f"== B: host per call, N={n}, behind a busy GPU ({calls} calls, single calls)")
    for name, fn in fns.items():
        for _ in range(3):
            fn(*x)
        torch.cuda.synchronize()
        ACC.clear()
        CNT.clear()
        per = []
        for i in range(calls):
            busy(x[1], big)
            t0 = pc()
            fn(*x)
            per.append(pc() - t0)
            torch.cuda.synchronize()
        med = statistics.median(per) * 1e6
        print(f"  {name}: median {med:.0f} us (min {min(per) * 1e6:.0f})")
        for key in sorted(ACC, key=lambda k: -ACC[k]):
            print(f"      {ACC[key] / calls * 1e6:8.1f} us/call  {key}"
                  f"{'  x%.1f' % (CNT[key] / calls) if CNT[key] else ''}")
    # the pieces of torch: an empty, a pinned record copy
    for label, f in (("torch.empty cuda", lambda: torch.empty(256, 4, device="cuda")),
                     ("pinned empty + copy + event", lambda: _pinned(x[0]))):
        busy(x[1], big)
        t0 = pc()
        for _ in range(50):
            f()
        print(f"  {label}: {(pc() - t0) / 50 * 1e6:.1f} us")
        torch.cuda.synchronize()


def _pinned(t):
    rec = t[:8, :4].long()
    host = torch.empty(rec.shape, dtype=torch.int64, pin_memory=True)
    host.copy_(rec, non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()


if __name__ == "__main__":
    which = sys.argv[1:] or ["a", "b"]
    print(torch.__version__, torch.cuda.get_device_name())
    if "a" in which:
        part_a()
    if "b" in which:
        for mod, name in ((linear_logprob, "validate_inputs"), (linear_logprob, "shard_labels"),
                          (linear_logprob, "inverse_temperature"), (label_check, "poll"),
                          (label_check, "defer_record"), (label_check, "defer_ids"),
                          (triton_impl, "forward_stats"), (triton_impl, "finalize"),
                          (triton_impl, "check_ids"), (triton_impl, "logits_at"),
                          (triton_topk, "topk_stats"), (linear_logprobs_at, "validate_inputs"),
                          (linear_topk, "validate_inputs"), (linear_topk, "inverse_temperature"),
                          (linear_logprobs_at, "inverse_temperature")):
            if hasattr(mod, name):
                timed(mod, name)
        patch_triton()
        for n in (256, 8192):
            part_b(n)
