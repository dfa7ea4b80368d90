#!/usr/bin/env python3
"""This checkout's fused op against a baseline copy of the package, in one process (GPU).

Per shape (bf16, temperature 0.7, the inputs of bench_fused_logprob.py), methods timed by
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
    python tools/bench_vs_baseline.py --baseline /tmp/base --out out/vs_base
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.bench import timing  # noqa: E402
from tools.bench.clocks import ClockSampler  # noqa: E402
from tools.bench.inputs import (SHAPES, TEMPERATURE, fp32_grads,  # noqa: E402
                                fp64_reference, loss_coeffs, make_inputs, max_err)
from tools.bench.memory import peak_extra_gib  # noqa: E402
from tools.bench.methods import Gemm  # noqa: E402

INVARIANCE_ENV = "MEGATRON_OVERLAY_BATCH_INVARIANT"


def _op(package: str):
    return importlib.import_module(f"{package}.ops").linear_logprob_entropy


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
                                  args.rounds, burst_ms=args.burst_ms, clocks=clocks, log=log)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="a folder holding the package megatron_overlay_base")
    parser.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--rounds", "--repeats", type=int, default=7)
    parser.add_argument("--burst-ms", type=float, default=300.0)
    parser.add_argument("--grad-shape", default="32768,1024,32768",
                        help="N,H,V of the gradient accuracy check ('' to skip)")
    parser.add_argument("--fb-variant", action="append", default=[],
                        help="NAME:KEY=VALUE[,KEY=VALUE]: our op with autotune_configs "
                             "overrides, timed in fb (e.g. b480:BACKWARD_EXTRA_BUDGET_BYTES="
                             "503316480)")
    parser.add_argument("--profile", default="", help="N,H,V: profile one fb per method")
    parser.add_argument("--out", default="out/vs_baseline")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "log.txt", "w")

    def log(msg):
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    ours = _op("megatron_overlay")
    runners = {"ours": Runner(ours), "ours_var": Runner(ours, invariant=False)}
    for spec in args.fb_variant:
        name, _, pairs = spec.partition(":")
        overrides = {k: int(v) for k, v in (p.split("=") for p in pairs.split(","))}
        runners[f"fb_{name}"] = Runner(ours, overrides=overrides)
    if args.baseline:
        sys.path.insert(0, args.baseline)
        runners["base"] = Runner(_op("megatron_overlay_base"))
    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
    if args.profile:
        profile_fb(runners, *map(int, args.profile.split(",")), out, log)
    with ClockSampler(torch.cuda.current_device()) as clocks:
        rows = [bench_shape(*map(int, s.split(",")), runners, args, clocks, log)
                for s in args.shapes.split(";")]
    acc = grad_accuracy(runners, *map(int, args.grad_shape.split(",")), log) \
        if args.grad_shape else None
    (out / "results.json").write_text(json.dumps({"rows": rows, "grad_accuracy": acc},
                                                 indent=1))
    log("\n| N, H, V | gemm fwd | base fwd | ours fwd | ours fwd, invariance off | ours/base fwd "
        "| gemm fb | base fb | ours fb | ours/base fb | base fb extra GiB | ours fb extra GiB "
        "| ours fwd extra GiB | invariant rows base / ours (of 1024) |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r.get
        log(f"| {r['N']}, {r['H']}, {r['V']} | {g('gemm_fwd_ms', 0):.2f} "
            f"| {g('base_fwd_ms', 0):.2f} | {g('ours_fwd_ms'):.2f} | {g('ours_var_fwd_ms'):.2f} "
            f"| {g('ours_vs_base_fwd', 0):.3f} "
            f"| {g('gemm_fb_ms'):.2f} | {g('base_fb_ms', 0):.2f} | {g('ours_fb_ms'):.2f} "
            f"| {g('ours_vs_base_fb', 0):.3f} | {g('base_fb_extra_gib', 0):.3f} "
            f"| {g('ours_fb_extra_gib'):.3f} | {g('ours_fwd_extra_gib'):.3f} "
            f"| {g('base_invariant_rows', -1)} / {g('ours_invariant_rows')} |")
    for r in rows:
        for m in [k[:-6] for k in r if k.startswith("fb_") and k.endswith("_fb_ms")]:
            log(f"{r['N']},{r['H']},{r['V']} {m}: fb {r[m + '_fb_ms']:.2f} ms "
                f"({r[m + '_fb_ms'] / r['base_fb_ms'] if 'base_fb_ms' in r else 0:.3f} x base), "
                f"extra {r[m + '_fb_extra_gib']:.3f} GiB")


if __name__ == "__main__":
    main()
