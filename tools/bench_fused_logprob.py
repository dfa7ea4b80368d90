#!/usr/bin/env python3
"""Benchmark the fused log-prob/entropy op against the GEMM floor, materialized logits and peers.

One run measures, per shape (N tokens, H hidden, V vocab; bf16, temperature 0.7):
  gemm          the floor: hidden @ W.T (fwd); that plus the two backward GEMMs (fb)
  materialized  fp32 logits / T -> log_softmax -> gather, entropy (autograd)
  ours          megatron_overlay.ops.linear_logprob_entropy (Triton kernels on CUDA)
  verl          verl.utils.kernel.linear_cross_entropy (log-prob + entropy), if importable
  liger_flce    Liger fused linear cross-entropy (scalar mean loss only), if importable
  cce           cut-cross-entropy linear_cross_entropy (per-token NLL), if importable
forward (no grad) and forward+backward (a loss on the per-token outputs): median time of
repeats with CUDA events over rotating inputs, peak extra memory over the inputs, max abs
error vs fp64 on the first tokens. Prints a table; writes results.json and bench.png.

    python tools/bench_fused_logprob.py --out out/bench            # the table
    python tools/bench_fused_logprob.py --sweep --out out/sweep    # kernel configs
    python tools/bench_fused_logprob.py --shapes 8192,4096,151936 --methods gemm,ours

Peers are optional: each is imported and run inside try/except; verl's kernel files are
loaded without the rest of verl (a stub ``verl.utils.device``), Liger's SM90 CuTe path
is not used (its 92 MB cutlass wheel does not travel).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import statistics
import sys
import time
import traceback
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)]
TEMPERATURE = 0.7
ACC_ROWS = 1024      # tokens checked against fp64 (the reference is [ACC_ROWS, V] fp64)
ROTATE = 2           # input sets rotated between timed calls (each is > L2)
GiB = float(1 << 30)


# ----------------------------------------------------------------------------- timing

def cuda_time(fn, inputs, warmup: int, repeats: int) -> float:
    """Median milliseconds of fn(*inputs[i % len]) with CUDA events."""
    for i in range(warmup):
        fn(*inputs[i % len(inputs)])
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        args = inputs[i % len(inputs)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def peak_extra(fn, args) -> float:
    """Peak bytes allocated by one call beyond what was allocated before it (GiB)."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / GiB


# ----------------------------------------------------------------------------- methods

def _loss_coeffs(n, device, seed=1):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(n, device=device, generator=g) / n,
            torch.randn(n, device=device, generator=g) / n)


def input_grads(h, w, loss_of):
    """Backward of ``loss_of(h, w)`` from fresh leaves: (d_hidden, d_weight)."""
    h, w = h.detach().requires_grad_(), w.detach().requires_grad_()
    loss_of(h, w).backward()
    return h.grad, w.grad


class Method:
    name = "?"
    outputs = "logprob+entropy"

    def fwd(self, h, w, y):  # -> (logprob [N] fp32 or None, entropy [N] or None)
        raise NotImplementedError

    def fb(self, h, w, y, a, b):
        """Forward + backward of sum(a * logprob + b * entropy); returns the grads."""
        def loss(h, w):
            lp, ent = self.fwd(h, w, y)
            return (lp * a).sum() + ((ent * b).sum() if ent is not None else 0)
        return input_grads(h, w, loss)


class Gemm(Method):
    """The floor. fb: hidden @ W.T, then G @ W and G.T @ hidden with G a fixed random normal
    [N, V] bf16 tensor (held between calls)."""
    name, outputs = "gemm", "logits only (floor)"

    def __init__(self):
        self.grad = None

    def fwd(self, h, w, y):
        torch.matmul(h, w.T)
        return None, None

    def fb(self, h, w, y, a, b):
        if self.grad is None or self.grad.shape != (h.shape[0], w.shape[0]):
            self.grad = None
            self.grad = torch.randn(h.shape[0], w.shape[0], device=h.device, dtype=h.dtype)
        torch.matmul(h, w.T)
        return torch.matmul(self.grad, w), torch.matmul(self.grad.T, h)


class GemmLogitsGrad(Gemm):
    """The floor with the logits themselves as G: same shapes and FLOPs, different data; the
    H200's clocks depend on the data (power), which moves this floor by ~10%."""
    name, outputs = "gemm_lg", "logits only (floor, G = logits)"

    def fb(self, h, w, y, a, b):
        logits = torch.matmul(h, w.T)
        return torch.matmul(logits, w), torch.matmul(logits.T, h)


class Materialized(Method):
    name = "materialized"

    def _run(self, h, w, y):
        logits = (h @ w.T).float() / TEMPERATURE
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(1, y[:, None]).squeeze(1)
        ent = -(logp.exp() * logp).sum(-1)
        return lp, ent

    def fwd(self, h, w, y):
        return self._run(h, w, y)


class Ours(Method):
    name = "ours"

    def __init__(self, entropy=True):
        from megatron_overlay.ops import linear_logprob_entropy
        self.op = linear_logprob_entropy
        self.entropy = entropy
        if not entropy:
            self.name, self.outputs = "ours_noent", "logprob"

    def fwd(self, h, w, y):
        return self.op(h, w, y, temperature=TEMPERATURE, return_entropy=self.entropy)


class LigerScaledCE(Method):
    """Liger-Kernel's fused linear scaled cross-entropy (log-prob + entropy, temperature):
    its SM90 CuTe-DSL kernels on Hopper (needs nvidia-cutlass-dsl), else its torch path."""
    name, outputs = "liger_scaled_ce", "logprob+entropy"

    def __init__(self):
        from liger_kernel.ops.fused_linear_scaled_cross_entropy import (
            LigerFusedLinearScaledCrossEntropyFunction,
        )
        self.fn = LigerFusedLinearScaledCrossEntropyFunction

    def _run(self, h, w, y):
        nll, entropy = self.fn.apply(h, w, y, TEMPERATURE, -100, 1, True)
        return -nll.float(), entropy.float()

    def fwd(self, h, w, y):
        return self._run(h, w, y)


_VERL = []


def _load_verl():
    """verl's two kernel files, without verl's package __init__ (it imports ray and more)."""
    if _VERL:
        return _VERL[0]
    spec = importlib.util.find_spec("verl")
    if spec is None:
        raise ImportError("verl is not installed")
    root = Path(spec.submodule_search_locations[0])
    for name, path in (("verl", root), ("verl.utils", root / "utils"),
                       ("verl.utils.kernel", root / "utils" / "kernel")):
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]
        sys.modules[name] = mod
    device = types.ModuleType("verl.utils.device")
    device.is_cuda_available = torch.cuda.is_available()
    device.get_device_name = lambda: "cuda"
    device.get_torch_device = lambda: torch.cuda
    device.get_device_capability = lambda *a: torch.cuda.get_device_capability()
    device.get_device_id = lambda: torch.cuda.current_device()
    sys.modules["verl.utils.device"] = device
    from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy
    _VERL.append(linear_cross_entropy)
    return linear_cross_entropy


class Verl(Method):
    name = "verl"

    def __init__(self):
        self.op = _load_verl()

    def fwd(self, h, w, y):
        return self.op(h, w, y, TEMPERATURE, "none")


class LigerFLCE(Method):
    name, outputs = "liger_flce", "scalar mean loss, T=1"

    def __init__(self):
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
        self.fn = LigerFusedLinearCrossEntropyFunction

    def fwd(self, h, w, y):
        self.fn.apply(h, w, y)
        return None, None

    def fb(self, h, w, y, a, b):
        def loss(h, w):
            out = self.fn.apply(h, w, y)
            return out[0] if isinstance(out, tuple) else out
        return input_grads(h, w, loss)


class CCE(Method):
    name, outputs = "cce", "per-token NLL, T=1"

    def __init__(self):
        from cut_cross_entropy import linear_cross_entropy
        self.op = linear_cross_entropy

    def fwd(self, h, w, y):
        self.op(h, w, y, reduction="none")
        return None, None  # no temperature: not comparable with the T=0.7 reference

    def fb(self, h, w, y, a, b):
        return input_grads(h, w, lambda h, w: (self.op(h, w, y, reduction="none") * a).sum())


class CCEMean(CCE):
    name, outputs = "cce_mean", "mean NLL (scalar), T=1"

    def fb(self, h, w, y, a, b):
        return input_grads(h, w, lambda h, w: self.op(h, w, y, reduction="mean"))


METHODS = {"gemm": Gemm, "gemm_lg": GemmLogitsGrad, "materialized": Materialized, "ours": Ours,
           "ours_noent": lambda: Ours(entropy=False), "verl": Verl, "liger_flce": LigerFLCE, "liger_scaled_ce": LigerScaledCE,
           "cce": CCE, "cce_mean": CCEMean}


# ----------------------------------------------------------------------------- accuracy

def fp64_reference(h, w, y, rows):
    z = (h[:rows].double() @ w.double().T) / TEMPERATURE
    logp = torch.log_softmax(z, dim=-1)
    lp = logp.gather(1, y[:rows, None]).squeeze(1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


def max_err(out, ref):
    if out is None:
        return None
    return (out[:ref.shape[0]].double() - ref).abs().max().item()


# ----------------------------------------------------------------------------- runs

def make_inputs(n, hdim, v, seed, device="cuda", dtype=torch.bfloat16):
    g = torch.Generator(device=device).manual_seed(seed)
    sets = []
    for _ in range(ROTATE):
        h = torch.randn(n, hdim, device=device, dtype=dtype, generator=g)
        y = torch.randint(0, v, (n,), device=device, generator=g)
        sets.append((h, y))
    # logits std ~ 2 at T = 0.7: a realistic, far from uniform softmax
    w = (torch.randn(v, hdim, device=device, dtype=torch.float32, generator=g)
         * (1.4 / math.sqrt(hdim))).to(dtype)
    return sets, w


def _nvml_reader():
    """() -> (SM clock MHz, power W) right now, or None without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return lambda: (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    except Exception:
        return None


def bench_shape(n, hdim, v, methods, args, log):
    """All methods timed interleaved (rep by rep, in a shuffled order each rep), so that clock
    and power drift falls on every method alike; then peak memory and accuracy. The SM clock
    and board power are sampled (NVML) at the end of each timed call: the H200 lowers its
    clocks at its power limit, and heavier per-element work draws more power."""
    import random
    order_rng = random.Random(n)
    nvml = _nvml_reader()
    sets, w = make_inputs(n, hdim, v, seed=n)
    a, b = _loss_coeffs(n, w.device)
    ref_lp, ref_ent = fp64_reference(sets[0][0], w, sets[0][1], min(ACC_ROWS, n))
    objs, rows = {}, {}
    for name in methods:
        try:
            objs[name] = METHODS[name]()
        except Exception as e:  # a peer that is not importable
            log(f"  {name}: unavailable ({type(e).__name__}: {str(e)[:200]})")
            continue
        rows[name] = {"N": n, "H": hdim, "V": v, "method": name, "outputs": objs[name].outputs}
    fwd_inputs = [(h, w, y) for h, y in sets]
    fb_inputs = [(h, w, y, a, b) for h, y in sets]
    for phase, inputs in (("fwd", fwd_inputs), ("fb", fb_inputs)):
        live = [m for m in objs if not (phase == "fb" and m in args.fwd_only)]
        if phase == "fwd":
            live = [m for m in live if m not in ("cce_mean", "gemm_lg")]  # same fwd
        times = {m: [] for m in live}
        clocks = {m: [] for m in live}
        ctx = torch.no_grad if phase == "fwd" else torch.enable_grad
        reps = args.repeats if phase == "fwd" else max(3, args.repeats - 2)
        with ctx():
            for rep in range(2 + reps):  # 2 warm-up rounds (compilation, autotuning)
                for m in order_rng.sample(live, len(live)):
                    fn = getattr(objs[m], phase)
                    try:
                        start = torch.cuda.Event(enable_timing=True)
                        end = torch.cuda.Event(enable_timing=True)
                        start.record()
                        out = fn(*inputs[rep % len(inputs)])
                        end.record()
                        if nvml is not None:  # sampled while the call's queued kernels run
                            samples = []
                            while not end.query() and len(samples) < 200:
                                samples.append(nvml())
                                time.sleep(0.002)
                            if samples:
                                clocks[m].append(tuple(statistics.median(x) for x in zip(*samples)))
                        torch.cuda.synchronize()
                        del out
                        if rep >= 2:
                            times[m].append(start.elapsed_time(end))
                    except Exception as e:
                        rows[m][f"{phase}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                        log(f"  {m} {phase}: {rows[m][f'{phase}_error']}")
                        live.remove(m)
                        gc.collect()
                        torch.cuda.empty_cache()
            for m in live:
                if clocks[m]:
                    rows[m][f"{phase}_sm_mhz"] = statistics.median(c[0] for c in clocks[m])
                    rows[m][f"{phase}_watts"] = statistics.median(c[1] for c in clocks[m])
                rows[m][f"{phase}_ms"] = statistics.median(times[m])
                rows[m][f"{phase}_ms_all"] = [round(t, 3) for t in times[m]]
                try:
                    rows[m][f"{phase}_peak_gib"] = peak_extra(getattr(objs[m], phase), inputs[0])
                    if phase == "fwd":
                        lp, ent = objs[m].fwd(*inputs[0])
                        rows[m]["lp_err"] = max_err(lp, ref_lp)
                        rows[m]["ent_err"] = max_err(ent, ref_ent)
                        del lp, ent
                except Exception as e:
                    rows[m][f"{phase}_peak_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                gc.collect()
                torch.cuda.empty_cache()
    rows = list(rows.values())
    floor = {r["method"]: r for r in rows}.get("gemm", {})
    for r in rows:
        if "fwd_ms" in r and floor.get("fwd_ms"):
            r["fwd_x_gemm"] = r["fwd_ms"] / floor["fwd_ms"]
        if "fb_ms" in r and floor.get("fb_ms"):
            r["fb_x_3gemm"] = r["fb_ms"] / floor["fb_ms"]
        log(f"  {json.dumps(r)}")
    return rows


def grad_check(hdim, v, n, log):
    """Our d_hidden, d_weight (bf16) vs an fp32 autograd reference on the same bf16 inputs,
    in units of the error of rounding that reference to bf16."""
    sets, w = make_inputs(n, hdim, v, seed=7)
    h, y = sets[0]
    a, b = _loss_coeffs(n, w.device, seed=3)
    h32, w32 = h.float().requires_grad_(), w.float().requires_grad_()
    z = (h32 @ w32.T) / TEMPERATURE
    logp = torch.log_softmax(z, -1)
    lp = logp.gather(1, y[:, None]).squeeze(1)
    ent = -(logp.exp() * logp).sum(-1)
    ((lp * a).sum() + (ent * b).sum()).backward()
    ref = {"d_hidden": h32.grad, "d_weight": w32.grad}
    del z, logp
    out = {}
    for key, got in zip(("d_hidden", "d_weight"), Ours().fb(h, w, y, a, b)):
        r = ref[key]
        rounding = (r.to(torch.bfloat16).float() - r).norm().item()
        err = (got.float() - r).norm().item()
        out[key] = {"rel_err": err / r.norm().item(), "vs_bf16_rounding": err / max(rounding, 1e-30),
                    "max_abs": (got.float() - r).abs().max().item(),
                    "bf16_rounding_max_abs": (r.to(torch.bfloat16).float() - r).abs().max().item()}
    log(f"  grad check N={n} H={hdim} V={v}: {json.dumps(out)}")
    return out


def kernel_breakdown(n, hdim, v, log):
    """Per-kernel CUDA time of one forward+backward of ours (torch.profiler)."""
    sets, w = make_inputs(n, hdim, v, seed=11)
    h, y = sets[0]
    a, b = _loss_coeffs(n, w.device)

    def step():
        Ours().fb(h, w, y, a, b)

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
    log(f"  kernel breakdown (ms) N={n}: {json.dumps(top)}")
    return top


def timeline(n, hdim, v, log):
    """Where one forward+backward of ours leaves the GPU idle: gaps between kernels, with
    the host-side ops that ran meanwhile."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    sets, w = make_inputs(n, hdim, v, seed=11)
    h, y = sets[0]
    a, b = _loss_coeffs(n, w.device)

    def step():
        Ours().fb(h, w, y, a, b)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = list(prof.events())
    gpu = sorted((e for e in events if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start),
                 key=lambda e: e.time_range.start)
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    out = {"span_ms": (gpu[-1].time_range.end - gpu[0].time_range.start) / 1000.0,
           "busy_ms": sum(e.time_range.end - e.time_range.start for e in gpu) / 1000.0, "gaps": []}
    for prev, nxt in zip(gpu, gpu[1:]):
        gap = nxt.time_range.start - prev.time_range.end
        if gap > 200:  # us
            lo, hi = prev.time_range.end, nxt.time_range.start
            host = sorted((e for e in cpu if e.time_range.start < hi and e.time_range.end > lo),
                          key=lambda e: -(min(e.time_range.end, hi) - max(e.time_range.start, lo)))
            out["gaps"].append({"ms": gap / 1000.0, "after": prev.name[:60], "before": nxt.name[:60],
                                "host": [f"{e.name[:50]} {(e.time_range.end - e.time_range.start) / 1000:.2f}ms"
                                         for e in host[:6]]})
    log(f"  timeline N={n}: {json.dumps(out)}")
    return out


def sweep(args, log):
    """Each candidate kernel config at one shape: forward stats and backward, timed and checked."""
    from dataclasses import asdict
    from megatron_overlay.ops.kernels import autotune_configs as ac
    from megatron_overlay.ops.kernels import triton_impl as ti
    n, hdim, v = args.sweep_shape
    sets, w = make_inputs(n, hdim, v, seed=5)
    inv_t = 1.0 / TEMPERATURE
    lsets = [(h, torch.where(y % 7 == 0, -1, y)) for h, y in sets]
    ref_lp, ref_ent = fp64_reference(sets[0][0], w, sets[0][1], ACC_ROWS)
    gemm_ms = cuda_time(lambda h, w_: torch.matmul(h, w_.T), [(h, w) for h, _ in sets], 2, 5)
    log(f"sweep N={n} H={hdim} V={v}: gemm {gemm_ms:.2f} ms")
    results = {"shape": [n, hdim, v], "gemm_ms": gemm_ms, "forward": [], "backward": []}
    for cfg in ac.FORWARD_CANDIDATES:
        rec = {"config": cfg.name(), **asdict(cfg)}
        try:
            t0 = time.time()
            stats = ti.forward_stats(sets[0][0], w, sets[0][1], inv_t, True, config=cfg)
            rec["compile_s"] = time.time() - t0
            lse = stats[:, 0] + stats[:, 1].log()
            rec["lp_err"] = max_err(stats[:, 3] - lse, ref_lp)
            rec["ent_err"] = max_err(stats[:, 1].log() - stats[:, 2] / stats[:, 1], ref_ent)
            rec["ms"] = cuda_time(lambda h, y: ti.forward_stats(h, w, y, inv_t, True, config=cfg),
                                  lsets, 1, 5)
            rec["x_gemm"] = rec["ms"] / gemm_ms
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        log(f"  fwd {json.dumps(rec)}")
        results["forward"].append(rec)
    # backward: the default config's result is the check for the others
    h, y = sets[0]
    stats = ti.forward_stats(h, w, y, inv_t, True)
    lse = stats[:, 0] + stats[:, 1].log()
    mean_z = stats[:, 0] + stats[:, 2] / stats[:, 1]
    g_lp, g_ent = _loss_coeffs(n, w.device)
    base_dh, base_dw = ti.backward(h, w, y, inv_t, lse, mean_z, g_lp, g_ent)
    grad = torch.randn(n, v, device=w.device, dtype=w.dtype)
    # G @ W and G.T @ h have equal FLOPs: twice the median of the two, alternated
    results["bwd_gemms_ms"] = cuda_time(torch.matmul, [(grad, w), (grad.T, h)], 1, 6) * 2
    grad = None
    log(f"  two backward GEMMs (cuBLAS, bf16 out): {results['bwd_gemms_ms']:.2f} ms")
    for cfg in ac.BACKWARD_CANDIDATES:
        rec = {"config": cfg.name(), **asdict(cfg)}
        try:
            dh, dw = ti.backward(h, w, y, inv_t, lse, mean_z, g_lp, g_ent, config=cfg)
            rec["dh_rel_diff"] = ((dh - base_dh).norm() / base_dh.norm()).item()
            rec["dw_rel_diff"] = ((dw - base_dw).norm() / base_dw.norm()).item()
            del dh, dw
            rec["ms"] = cuda_time(lambda: ti.backward(h, w, y, inv_t, lse, mean_z, g_lp, g_ent,
                                                      config=cfg), [()], 1, 3)
            rec["x_gemm"] = rec["ms"] / gemm_ms
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        log(f"  bwd {json.dumps(rec)}")
        results["backward"].append(rec)
    return results


# ----------------------------------------------------------------------------- report

def table(rows):
    head = ("| N, H, V | method | outputs | fwd ms | fb ms | fwd x GEMM | fb x 3 GEMMs | "
            "fwd peak GiB | fb peak GiB | logprob err | entropy err | SM MHz fwd / fb |")
    lines = [head, "|" + "---|" * 12]
    fmt = lambda x, f: "" if x is None else format(x, f)  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r['N']}, {r['H']}, {r['V']} | {r['method']} | {r['outputs']} | "
            f"{fmt(r.get('fwd_ms'), '.2f')} | {fmt(r.get('fb_ms'), '.2f')} | "
            f"{fmt(r.get('fwd_x_gemm'), '.3f')} | {fmt(r.get('fb_x_3gemm'), '.3f')} | "
            f"{fmt(r.get('fwd_peak_gib'), '.3f')} | {fmt(r.get('fb_peak_gib'), '.2f')} | "
            f"{fmt(r.get('lp_err'), '.1e')} | {fmt(r.get('ent_err'), '.1e')} | "
            f"{fmt(r.get('fwd_sm_mhz'), '.0f')} / {fmt(r.get('fb_sm_mhz'), '.0f')} |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    names = list(dict.fromkeys(r["method"] for r in rows))
    colors = {name: f"C{i % 10}" for i, name in enumerate(names)}
    for name in names:
        rs = sorted((r for r in rows if r["method"] == name), key=lambda r: r["N"])
        for ax, key in zip(axes, ("fwd_ms", "fb_ms", "fwd_peak_gib")):
            pts = [(r["N"], max(r[key], 1e-4) if key.endswith("gib") else r[key])
                   for r in rs if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=colors[name], label=name)
    for ax, title in zip(axes, ("forward (ms)", "forward + backward (ms)",
                                "forward peak extra memory (GiB, floor 1e-4)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N tokens")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[2].set_yscale("log")
    fig.suptitle("fused log-prob + entropy, bf16, T=0.7 (H, V per shape in results.json)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/bench_fused_logprob")
    p.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES),
                   help="N,H,V[;N,H,V...]")
    p.add_argument("--methods", default="gemm,gemm_lg,materialized,ours,verl,liger_flce,liger_scaled_ce,cce,cce_mean")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sweep", action="store_true", help="time the kernel config candidates")
    p.add_argument("--sweep-shape", default="8192,4096,151936")
    p.add_argument("--no-grad-check", action="store_true")
    p.add_argument("--replot", default="", help="results.json: redraw its plot and table, no GPU")
    p.add_argument("--timeline", default="", help="N,H,V: GPU idle gaps of one fb step of ours")
    p.add_argument("--no-breakdown", action="store_true")
    p.add_argument("--skip", default="", help="method@N pairs to skip, e.g. materialized@32768")
    p.add_argument("--fwd-only", default="", help="methods timed forward only")
    args = p.parse_args(argv)
    args.sweep_shape = tuple(int(x) for x in args.sweep_shape.split(","))
    args.fwd_only = set(m for m in args.fwd_only.split(",") if m)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        rows = json.loads(Path(args.replot).read_text())["rows"]
        plot(rows, out / "bench.png")
        print(table(rows))
        return 0
    logf = open(out / "log.txt", "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": __import__("triton").__version__, "temperature": TEMPERATURE,
            "date": time.strftime("%Y-%m-%d %H:%M"), "argv": sys.argv[1:]}
    log(json.dumps(meta))
    if args.timeline:
        n, hdim, v = (int(x) for x in args.timeline.split(","))
        res = timeline(n, hdim, v, log)
        (out / f"timeline_{n}.json").write_text(json.dumps(res, indent=1))
        return 0
    if args.sweep:
        res = sweep(args, log)
        (out / "sweep.json").write_text(json.dumps({"meta": meta, **res}, indent=1))
        return 0
    skip = set(s for s in args.skip.split(",") if s)
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";") if s]
    methods = [m for m in args.methods.split(",") if m]
    rows, extra = [], {}
    for n, hdim, v in shapes:
        log(f"shape N={n} H={hdim} V={v}")
        ms = [m for m in methods if f"{m}@{n}" not in skip]
        rows += bench_shape(n, hdim, v, ms, args, log)
        if not args.no_breakdown and "ours" in methods:
            try:
                extra[f"breakdown_{n}"] = kernel_breakdown(n, hdim, v, log)
            except Exception as e:
                log(f"  breakdown failed: {e}")
        (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, **extra}, indent=1))
    if not args.no_grad_check:
        try:
            n, hdim, v = shapes[0]
            extra["grad_check"] = grad_check(hdim, v, 2048, log)
        except Exception:
            log("grad check failed: " + traceback.format_exc()[-800:])
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, **extra}, indent=1))
    try:
        plot(rows, out / "bench.png")
    except Exception as e:
        log(f"plot failed: {e}")
    log(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
