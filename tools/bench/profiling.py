"""Views of ours beyond its time: gradient accuracy against fp32 autograd, per-kernel CUDA
time of one forward+backward (torch.profiler), and the host side of one call."""

from __future__ import annotations

import json
import time

import torch

from .inputs import TEMPERATURE, fp32_grads, loss_coeffs, make_inputs
from .methods import Ours


def _fb_inputs(n, hdim, v, seed=11, coeff_seed=1):
    """(h, w, y, a, b): one input set and the loss coefficients of the profiled step."""
    sets, w = make_inputs(n, hdim, v, seed=seed)
    h, y = sets[0]
    a, b = loss_coeffs(n, w.device, seed=coeff_seed)
    return h, w, y, a, b


def grad_check(methods, n, hdim, v, log):
    """Each method's d_hidden, d_weight (bf16) vs an fp32 autograd reference on the same
    bf16 inputs: relative Frobenius error, also in units of the error of rounding that
    reference to bf16 (under "bf16_rounding"). At T = TEMPERATURE, the methods' default
    (whatever a run's --temperature), iid inputs and uniform labels."""
    h, w, y, a, b = _fb_inputs(n, hdim, v, seed=7, coeff_seed=3)
    ref = dict(zip(("d_hidden", "d_weight"), fp32_grads(h, w, y, a, b)))

    def errors(got, r):
        return {"rel_err": (got - r).norm().item() / r.norm().item(),
                "max_abs": (got - r).abs().max().item()}

    out = {"N": n, "H": hdim, "V": v, "temperature": TEMPERATURE, "bf16_rounding": {
        k: errors(r.to(torch.bfloat16).float(), r) for k, r in ref.items()}}
    for m, method in methods.items():
        out[m] = {k: errors(got.float(), ref[k]) for k, got in zip(ref, method.fb(h, w, y, a, b))}
        for k, e in out[m].items():
            e["vs_bf16_rounding"] = e["rel_err"] / max(out["bf16_rounding"][k]["rel_err"], 1e-30)
    log(f"  grad check: {json.dumps(out)}")
    return out


def kernel_breakdown(n, hdim, v, log, method=None):
    """Per-kernel CUDA time of one forward+backward of ``method`` (ours; torch.profiler)."""
    h, w, y, a, b = _fb_inputs(n, hdim, v)
    method = method or Ours()

    def step():
        method.fb(h, w, y, a, b)

    step()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    totals = {}
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if t:
            totals[evt.key[:80]] = totals.get(evt.key[:80], 0) + t / 1000.0
    top = dict(sorted(totals.items(), key=lambda kv: -kv[1])[:8])
    top["(sum of all kernels)"] = sum(totals.values())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    top["(one step, CUDA events)"] = start.elapsed_time(end)
    log(f"  kernel breakdown (ms) {method.name} N={n}: {json.dumps(top)}")
    return top


def host_profile(n, hdim, v, log):
    """Host time of one call of ours (forward; forward+backward), enqueued while the GPU is
    busy with a long GEMM queue so that nothing waits for the GPU, and the host-side ops of
    that call by self CPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    h, w, y, a, b = _fb_inputs(n, hdim, v)
    ours = Ours()
    out = {}
    for phase, call, ctx in (("fwd", lambda: ours.fwd(h, w, y), torch.no_grad),
                             ("fb", lambda: ours.fb(h, w, y, a, b), torch.enable_grad)):
        with ctx():
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            host = []
            for _ in range(5):
                for _ in range(20):  # ~0.3 s of queued GPU work ahead of the call
                    torch.matmul(h, w.T)
                t0 = time.perf_counter()
                call()
                host.append((time.perf_counter() - t0) * 1e3)
                torch.cuda.synchronize()
            for _ in range(20):
                torch.matmul(h, w.T)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                call()
            torch.cuda.synchronize()
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:25]
        out[phase] = {"host_ms": sorted(host)[len(host) // 2], "host_ms_all": host,
                      "ops": [{"op": e.key[:80], "calls": e.count,
                               "self_cpu_ms": e.self_cpu_time_total / 1e3,
                               "cpu_ms": e.cpu_time_total / 1e3} for e in ops]}
        log(f"  host {phase} N={n}: {out[phase]['host_ms']:.3f} ms; top: " + "; ".join(
            f"{o['op']} x{o['calls']} {o['self_cpu_ms']:.3f}" for o in out[phase]["ops"][:12]))
        out[phase]["python"] = _python_profile(call, ctx, lambda: torch.matmul(h, w.T))
    return out


def _python_profile(call, ctx, busy, calls=10):
    """cProfile of ``calls`` calls enqueued behind a busy GPU: the Python functions by
    total (own) time and by cumulative time, as text."""
    import cProfile
    import io
    import pstats
    with ctx():
        for _ in range(40):
            busy()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            call()
        prof.disable()
        torch.cuda.synchronize()
    text = {}
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(30)
        text[key] = buf.getvalue()
    return text
