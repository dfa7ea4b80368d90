"""This checkout's fused op against a baseline copy of the package, in one process (GPU).

Per shape (bf16, temperature 0.7, the inputs of ``op``), methods timed by
tools/bench/timing.py (steady-state bursts, interleaved rounds, ratios paired per round):

  gemm      the floor: hidden @ W.T (fwd); plus G @ W and G.T @ hidden (fb)
  base      the baseline package's linear_logprob_entropy (``--baseline``)
  ours      this checkout's (batch invariance on: the default)
  ours_var  this checkout's with MEGATRON_OVERLAY_BATCH_INVARIANT=0 (fwd only)

and for base and ours: forward+backward extra peak memory, over the inputs and beyond the
two gradients themselves (d_hidden and d_weight in bf16, which any method returns); the
largest log-prob / entropy error vs fp64 on the first 1024 tokens; whether the first 1024
tokens' outputs are bitwise the same computed alone (batch invariance). Then gradient
accuracy of base and ours against an fp32 autograd reference at a smaller vocab.

    cp -r megatron_overlay /tmp/base/megatron_overlay_base   # (from the old checkout)
    python -m tools.bench baseline --baseline /tmp/base --out out/vs_base
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

from . import timing
from .clocks import ClockSampler
from .inputs import (SHAPES, TEMPERATURE, fp32_grads, fp64_reference, loss_coeffs, make_inputs,
                     max_err, shape)
from .methods import Gemm, peak_extra_gib
from .report import Run, markdown
from .timing import timing_options

INVARIANCE_ENV = "MEGATRON_OVERLAY_BATCH_INVARIANT"
BASE_PACKAGE = "megatron_overlay_base"


def _op(package: str):
    return importlib.import_module(f"{package}.ops").linear_logprob_entropy


def load_baseline(folder: Path):
    """The op of the package ``megatron_overlay_base`` in ``folder`` (imported from there,
    leaving sys.path alone)."""
    root = folder / BASE_PACKAGE
    spec = importlib.util.spec_from_file_location(
        BASE_PACKAGE, root / "__init__.py", submodule_search_locations=[str(root)])
    if spec is None:
        raise SystemExit(f"--baseline: no {BASE_PACKAGE} package in {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[BASE_PACKAGE] = module
    spec.loader.exec_module(module)
    return _op(BASE_PACKAGE)


class Runner:
    """One configuration of an op: batch invariance on/off and autotune_configs overrides
    (set around each call, e.g. {"BACKWARD_EXTRA_BUDGET_BYTES": 480 << 20})."""

    def __init__(self, op, invariant=True, overrides=None):
        self.op, self.invariant, self.overrides = op, invariant, overrides or {}

    def _call(self, fn):
        from megatron_overlay.ops.kernels import autotune_configs

        saved = {k: getattr(autotune_configs, k) for k in self.overrides}
        os.environ[INVARIANCE_ENV] = "1" if self.invariant else "0"
        for k, v in self.overrides.items():
            setattr(autotune_configs, k, v)
        try:
            return fn()
        finally:
            os.environ.pop(INVARIANCE_ENV, None)
            for k, v in saved.items():
                setattr(autotune_configs, k, v)

    def fwd(self, h, w, y):
        return self._call(lambda: self.op(h, w, y, temperature=TEMPERATURE))

    def fb(self, h, w, y, a, b):
        def run():
            hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
            lp, ent = self.op(hh, ww, y, temperature=TEMPERATURE)
            ((lp * a).sum() + (ent * b).sum()).backward()
            return hh.grad, ww.grad
        return self._call(run)


def r_is_fb_variant(name: str) -> bool:
    return name.startswith("fb_")


def timed(methods, phase, inputs, args, clocks, log):
    """name -> Timing of each method's ``phase`` (tools/bench/timing.py)."""
    ctx = torch.no_grad if phase == "fwd" else torch.enable_grad
    with ctx():
        return timing.interleaved({m: getattr(r, phase) for m, r in methods.items()}, inputs,
                                  args.rounds, burst_ms=args.burst_ms, heat_s=args.heat_s,
                                  clocks=clocks, log=log)


def bench_shape(n, hdim, v, runners, args, clocks, log):
    sets, w = make_inputs(n, hdim, v, seed=n)
    a, b = loss_coeffs(n, w.device)
    fwd_in = [(h, w, y) for h, y in sets]
    fb_in = [(h, w, y, a, b) for h, y in sets]
    row = {"N": n, "H": hdim, "V": v}
    fwd_methods = {"gemm": Gemm(), **runners}
    fb_methods = {m: r for m, r in fwd_methods.items() if m != "ours_var"}
    fwd_methods = {m: r for m, r in fwd_methods.items() if not r_is_fb_variant(m)}
    for phase, methods, inputs in (("fwd", fwd_methods, fwd_in), ("fb", fb_methods, fb_in)):
        times = timed(methods, phase, inputs, args, clocks, log)
        for m, t in times.items():
            row[f"{m}_{phase}_ms"] = t.median_ms
            row[f"{m}_{phase}_ms_all"] = [round(x, 3) for x in t.ms]
            row[f"{m}_{phase}_sm_mhz"] = timing.summarize(t).get("sm_mhz")
        if "base" in times:  # ours / base per round: median and range
            for m, (x, lo, hi) in timing.paired_ratios(times, "base").items():
                row[f"{m}_vs_base_{phase}_paired"] = [x, lo, hi]
    grads = (n * hdim + v * hdim) * 2
    ref_lp, ref_ent = fp64_reference(sets[0][0], w, sets[0][1], min(1024, n))
    for m in [m for m in runners if r_is_fb_variant(m)]:
        row[f"{m}_fb_extra_gib"] = peak_extra_gib(runners[m].fb, fb_in[0], exclude_bytes=grads)
        row[f"{m}_fb_x_gemm"] = row[f"{m}_fb_ms"] / row["gemm_fb_ms"]
    for m in ("base", "ours"):
        if m not in runners:
            continue
        with torch.no_grad():
            row[f"{m}_fwd_extra_gib"] = peak_extra_gib(runners[m].fwd, fwd_in[0])
            lp, ent = runners[m].fwd(*fwd_in[0])
            row[f"{m}_lp_err"], row[f"{m}_ent_err"] = max_err(lp, ref_lp), max_err(ent, ref_ent)
            k = min(1024, n)
            lp1, ent1 = runners[m].fwd(sets[0][0][:k], w, sets[0][1][:k])
            row[f"{m}_invariant_rows"] = int(((lp1 == lp[:k]) & (ent1 == ent[:k])).sum())
            del lp, ent, lp1, ent1
        row[f"{m}_fb_extra_gib"] = peak_extra_gib(runners[m].fb, fb_in[0], exclude_bytes=grads)
    for phase in ("fwd", "fb"):
        for m in ("base", "ours", "ours_var"):
            if f"{m}_{phase}_ms" in row:
                row[f"{m}_{phase}_x_gemm"] = row[f"{m}_{phase}_ms"] / row[f"gemm_{phase}_ms"]
    if "base" in runners:
        row["ours_vs_base_fwd"] = row["ours_fwd_ms"] / row["base_fwd_ms"]
        row["ours_vs_base_fb"] = row["ours_fb_ms"] / row["base_fb_ms"]
        row["invariance_cost_fwd"] = row["ours_fwd_ms"] / row["ours_var_fwd_ms"]
    log(json.dumps(row))
    del sets, w
    gc.collect()
    torch.cuda.empty_cache()
    return row


def profile_fb(runners, n, hdim, v, out: Path, log):
    """CUDA time per kernel of one forward+backward, per runner (torch.profiler)."""
    sets, w = make_inputs(n, hdim, v, seed=n)
    a, b = loss_coeffs(n, w.device)
    args = (sets[0][0], w, sets[0][1], a, b)
    for m, r in runners.items():
        if m == "ours_var":
            continue
        for _ in range(2):
            r.fb(*args)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            r.fb(*args)
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=14,
                                          max_name_column_width=70)
        with open(out / "profile_fb.txt", "a") as f:
            f.write(f"== {m} fb at {n},{hdim},{v}\n{table}\n")
    log(f"profile written: {out / 'profile_fb.txt'}")


def grad_accuracy(runners, n, hdim, v, log):
    """Relative Frobenius error of d_hidden, d_weight vs fp32 autograd on the same bf16
    inputs, and the same for the reference rounded to bf16 (the floor)."""
    sets, w = make_inputs(n, hdim, v, seed=11)
    h, y = sets[0]
    a, b = loss_coeffs(n, w.device, seed=3)
    ref = dict(zip(("d_hidden", "d_weight"), fp32_grads(h, w, y, a, b)))
    out = {"N": n, "H": hdim, "V": v}
    for key, r in ref.items():
        out[f"bf16_rounding_{key}"] = ((r.bfloat16().float() - r).norm() / r.norm()).item()
    for m in ("base", "ours"):
        if m in runners:
            for key, got in zip(ref, runners[m].fb(h, w, y, a, b)):
                out[f"{m}_{key}"] = ((got.float() - ref[key]).norm() / ref[key].norm()).item()
    log(json.dumps(out))
    return out


def add_arguments(p):
    p.add_argument("--baseline", help="a folder holding the package megatron_overlay_base")
    p.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES))
    timing_options(p)
    p.add_argument("--grad-shape", default="32768,1024,32768",
                   help="N,H,V of the gradient accuracy check ('' to skip)")
    p.add_argument("--fb-variant", action="append", default=[],
                   help="NAME:KEY=VALUE[,KEY=VALUE]: our op with autotune_configs "
                        "overrides, timed in fb (e.g. b480:BACKWARD_EXTRA_BUDGET_BYTES="
                        "503316480)")
    p.add_argument("--profile", default="", help="N,H,V: profile one fb per method")


TABLE_HEAD = ("N, H, V", "gemm fwd", "base fwd", "ours fwd", "ours fwd, invariance off",
              "ours/base fwd", "gemm fb", "base fb", "ours fb", "ours/base fb",
              "base fb extra GiB", "ours fb extra GiB", "ours fwd extra GiB",
              "invariant rows base / ours (of 1024)")


def table(rows) -> str:
    def cells(r):
        g = r.get
        return (f"{r['N']}, {r['H']}, {r['V']}", f"{g('gemm_fwd_ms', 0):.2f}",
                f"{g('base_fwd_ms', 0):.2f}", f"{g('ours_fwd_ms'):.2f}",
                f"{g('ours_var_fwd_ms'):.2f}", f"{g('ours_vs_base_fwd', 0):.3f}",
                f"{g('gemm_fb_ms'):.2f}", f"{g('base_fb_ms', 0):.2f}", f"{g('ours_fb_ms'):.2f}",
                f"{g('ours_vs_base_fb', 0):.3f}", f"{g('base_fb_extra_gib', 0):.3f}",
                f"{g('ours_fb_extra_gib'):.3f}", f"{g('ours_fwd_extra_gib'):.3f}",
                f"{g('base_invariant_rows', -1)} / {g('ours_invariant_rows')}")
    return markdown(TABLE_HEAD, [cells(r) for r in rows])


def main(args, argv) -> int:
    if not torch.cuda.is_available():
        args.parser.error("needs a CUDA GPU")
    run = Run(args, argv)
    log, out = run.log, run.out
    ours = _op("megatron_overlay")
    runners = {"ours": Runner(ours), "ours_var": Runner(ours, invariant=False)}
    for spec in args.fb_variant:
        name, _, pairs = spec.partition(":")
        overrides = {k: int(v) for k, v in (p.split("=") for p in pairs.split(","))}
        runners[f"fb_{name}"] = Runner(ours, overrides=overrides)
    if args.baseline:
        runners["base"] = Runner(load_baseline(Path(args.baseline)))
    log(json.dumps(run.meta))
    if args.profile:
        profile_fb(runners, *shape(args.profile), out, log)
    with ClockSampler(torch.cuda.current_device()) as clocks:
        rows = [bench_shape(*shape(s), runners, args, clocks, log)
                for s in args.shapes.split(";")]
    acc = grad_accuracy(runners, *shape(args.grad_shape), log) if args.grad_shape else None
    run.write("results.json", {"rows": rows, "grad_accuracy": acc})
    log("\n" + table(rows))
    for r in rows:
        for m in [k[:-6] for k in r if k.startswith("fb_") and k.endswith("_fb_ms")]:
            log(f"{r['N']},{r['H']},{r['V']} {m}: fb {r[m + '_fb_ms']:.2f} ms "
                f"({r[m + '_fb_ms'] / r['base_fb_ms'] if 'base_fb_ms' in r else 0:.3f} x base), "
                f"extra {r[m + '_fb_extra_gib']:.3f} GiB")
    return 0
