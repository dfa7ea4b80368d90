"""The fused log-prob/entropy op against the GEMM floor, materialized logits and peers.

Per shape (N tokens, H hidden, V vocab; bf16, T = 0.7), every method's forward (no grad) and
forward+backward (a loss on the per-token outputs), timed by tools/bench/timing.py (bursts;
with ``--sync`` also single synchronized calls), ratios to the GEMM floor paired per round
(the floor's bursts between the methods': --floor-bursts);
then each method's peak extra memory, its max abs error vs fp64 on the first tokens,
"invariant_rows" (of those tokens, how many come out bitwise the same computed alone) and
"fb_extra_gib" (the fb peak beyond the two bf16 gradients).
Methods: tools/bench/methods.py and peers.py. Writes results.json, table.md, bench.png.
``--baseline DIR``: DIR/megatron_overlay_base (from another commit) as the method "base",
ratios to it paired per round ({phase}_vs_base), and the gradient check covers it too.

    python -m tools.bench op --out out/bench            # every method, 3 shapes
    python -m tools.bench op --shapes 8192,4096,151936 --methods gemm,ours
    python -m tools.bench op --shapes "256,4096,151936;8192,4096,151936" --sync  # both protocols
    python -m tools.bench op --diagnose 8192,4096,151936 --out out/diag
    cp -r megatron_overlay /tmp/base/megatron_overlay_base   # (from the old checkout)
    python -m tools.bench op --baseline /tmp/base --out out/vs_base
    python -m tools.bench op --device cpu --shapes 64,32,512 --rounds 2 --burst-ms 2 --heat-s 0
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import traceback
from pathlib import Path

import torch

from . import profiling, protocols, report, sweep, timing
from .report import Run
from .timing import timing_options
from .clocks import ClockSampler
from .inputs import (ACC_ROWS, LABELS, LOGITS, SHAPES, TEMPERATURE, fp64_reference,
                     loss_coeffs, make_inputs, max_err, op_phases, shape)
from .methods import (BUILTIN, Ours, import_baseline, peak_extra_gib,
                      read_pending_label_checks)
from .peers import PEERS

METHODS = {**BUILTIN, **PEERS}
DEFAULT_METHODS = "gemm,materialized,ours,verl,liger_scaled_ce,liger_flce,cce"
BASELINE_METHODS = "gemm,base,ours,ours_var"


def load_baseline(folder: Path) -> None:
    """Import DIR/megatron_overlay_base and add the method "base" (its op)."""
    package = import_baseline(folder)
    METHODS["base"] = lambda: Ours(package=package, name="base")


def add_fb_variant(spec: str) -> str:
    """NAME:KEY=VALUE[,KEY=VALUE] -> the method fb_NAME (ours with those overrides)."""
    name, _, pairs = spec.partition(":")
    overrides = {k: int(v) for k, v in (p.split("=") for p in pairs.split(","))}
    METHODS[f"fb_{name}"] = lambda: Ours(name=f"fb_{name}", overrides=overrides,
                                         phases=("fb",))
    return f"fb_{name}"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _build(methods, log, temperature):
    objs = {}
    for name in methods:
        try:
            objs[name] = METHODS[name]()
            objs[name].temperature = temperature
        except Exception as e:  # a peer that is not installed
            log(f"  {name}: unavailable ({type(e).__name__}: {str(e)[:200]})")
    return objs


def bench_shape(n, hdim, v, methods, args, clocks, log):
    """Rows (one per method) for one shape: times, ratios, peaks, errors."""
    sets, w = make_inputs(n, hdim, v, seed=n, device=args.device, logits=args.logits,
                          labels=args.labels, temperature=args.temperature)
    a, b = loss_coeffs(n, w.device)
    k = min(ACC_ROWS, n)
    ref_lp, ref_ent = fp64_reference(sets[0][0], w, sets[0][1], k, args.temperature)
    head = METHODS["fp32_head"]()
    head.temperature = args.temperature
    with torch.no_grad():  # the fp32 head's log-probs: "mult_err" = mean |exp(lp - these) - 1|
        head_lp = head.fwd(sets[0][0][:k], w, sets[0][1][:k])[0].double()
    objs = _build(methods, log, args.temperature)
    rows = {m: {"N": n, "H": hdim, "V": v, "method": m, "outputs": o.outputs}
            for m, o in objs.items()}
    for phase, inputs, ctx in op_phases(sets, w, a, b):
        if phase not in args.phases:
            continue
        live = {m: getattr(o, phase) for m, o in objs.items() if phase in o.phases}
        if not live:  # e.g. only forward-only heads selected: nothing to time in fb
            continue
        with ctx():
            got = timing.interleaved(live, inputs, args.rounds, burst_ms=args.burst_ms,
                                     heat_s=args.heat_s, clocks=clocks, log=log,
                                     cuda=args.device == "cuda",
                                     bracket="gemm" if args.floor_bursts == "between"
                                     else None, settle=read_pending_label_checks)
        ratios = timing.paired_ratios(got, "gemm")
        if args.sync:  # the same methods as single synchronized calls (the host's time shows)
            with ctx():  # those the bursts did not drop (their error is in the row)
                single, single_ratios = timing.synchronized(
                    {m: f for m, f in live.items() if not got[m].error}, inputs,
                    args.rounds, "gemm", clocks=clocks, log=log,
                    cuda=args.device == "cuda", calls=args.sync_calls,
                    order=args.sync_order,
                    bracket=args.floor_bursts == "between")
            for m, r in single_ratios.items():
                rows[m][f"{phase}_sync_x"] = list(r)
            for m, t in single.items():
                rows[m][f"{phase}_sync_ms"] = t.median_ms
                if t.error:
                    rows[m][f"{phase}_sync_error"] = t.error
        if "base" in got:
            for m, r in timing.paired_ratios(got, "base").items():
                rows[m][f"{phase}_vs_base"] = list(r)
        for m, t in got.items():  # {phase}_ms, _ms_rounds, _calls, ... or {phase}_error
            rows[m].update({f"{phase}_{k}": x for k, x in timing.summarize(t).items()})
            if m in ratios:
                (rows[m][f"{phase}_x"], rows[m][f"{phase}_x_min"],
                 rows[m][f"{phase}_x_max"]) = ratios[m]
        for m in got:
            if got[m].error:
                continue
            try:
                with ctx():
                    peak = rows[m][f"{phase}_peak_gib"] = peak_extra_gib(live[m], inputs[0])
                    if phase == "fb" and peak is not None:
                        rows[m]["fb_extra_gib"] = max(peak - objs[m].grad_gib(n, hdim, v), 0.0)
                    if phase == "fwd" and objs[m].checked:
                        out = objs[m].fwd(*inputs[0])
                        lp, ent = out if isinstance(out, tuple) else (None, None)
                        rows[m]["lp_err"], rows[m]["ent_err"] = (max_err(lp, ref_lp),
                                                                 max_err(ent, ref_ent))
                        if lp is not None:
                            err = lp[:k].double() - ref_lp
                            rows[m]["lp_mean_err"] = err.abs().mean().item()
                            rows[m]["mult_err"] = (lp[:k].double() - head_lp).exp().sub(
                                1).abs().mean().item()
                        if lp is not None and ent is not None:
                            lp1, ent1 = objs[m].fwd(sets[0][0][:k], w, sets[0][1][:k])
                            rows[m]["invariant_rows"] = int(
                                ((lp1 == lp[:k]) & (ent1 == ent[:k])).sum())
                        del out, lp, ent
            except Exception as e:
                rows[m][f"{phase}_peak_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    for r in rows.values():
        log(f"  {json.dumps(r)}")
    del objs, sets, w
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return list(rows.values())


def diagnose(shape, args, clocks, log):
    """The same gemm-vs-ours ratios under each protocol of tools/bench/protocols.py, forward
    and forward+backward, each protocol twice in a row."""
    n, hdim, v = shape
    sets, w = make_inputs(n, hdim, v, seed=n, logits=args.logits, labels=args.labels,
                          temperature=args.temperature)
    a, b = loss_coeffs(n, w.device)
    objs = _build(args.methods, log, args.temperature)
    out = {"shape": list(shape)}
    for phase, inputs, ctx in op_phases(sets, w, a, b):
        protos = [p for p in args.protocols if phase == "fwd" or p != "graph"]
        fns = {m: getattr(o, phase) for m, o in objs.items()}
        with ctx():
            out[phase] = [protocols.compare(fns, inputs, "gemm", args.rounds, args.burst_ms,
                                            clocks, protos, log=lambda s: log(f"{phase}{s}"))
                          for _ in range(2)]
    return out


def add_arguments(p):
    p.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES),
                   help="N,H,V[;N,H,V...]")
    p.add_argument("--methods", help=f"of {','.join(METHODS)}; default {DEFAULT_METHODS} "
                                     f"({BASELINE_METHODS} with --baseline)")
    p.add_argument("--baseline", help="a folder holding the package megatron_overlay_base "
                                      f"(default methods then {BASELINE_METHODS}; ours_var: "
                                      "batch invariance off, forward only)")
    p.add_argument("--fb-variant", action="append", default=[],
                   help="NAME:KEY=VALUE[,KEY=VALUE]: ours with autotune_configs overrides, "
                        "timed in fb only, as fb_NAME "
                        "(e.g. b480:BACKWARD_EXTRA_BUDGET_BYTES=503316480)")
    timing_options(p)
    p.add_argument("--sync", action="store_true",
                   help="also time each method as single synchronized calls (--sync-calls, "
                        "default 4 x --rounds; paired ratios: {phase}_sync_x), beside the bursts")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a smoke run of the tool's code on tiny shapes (host-clock "
                        "timings, no memory figures), not a benchmark")
    p.add_argument("--logits", default="iid", choices=LOGITS,
                   help="the inputs' logit distribution (tools/bench/inputs.py)")
    p.add_argument("--labels", default="uniform", choices=LABELS,
                   help="sampled: drawn from the exact softmax, as rollout tokens are")
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--phases", default="fwd,fb",
                   help="fwd,fb (default), fwd, fb or both (= fwd,fb)")
    p.add_argument("--skip", default="", help="method@N pairs to skip, e.g. materialized@32768")
    p.add_argument("--no-grad-check", action="store_true")
    p.add_argument("--grad-shape", help="N,H,V of the gradient check (default 2048 tokens at "
                                        "the first shape's H,V; '' to skip)")
    p.add_argument("--breakdown", action="store_true",
                   help="per-kernel times of ours and base (profiler)")
    p.add_argument("--diagnose", default="", help="N,H,V: compare timing protocols there")
    p.add_argument("--protocols", default="old_tool,single,cold,burst,burst_fixed_input,"
                                          "burst_fixed_order,graph")
    p.add_argument("--host-profile", default="", help="N,H,V: host-side ops of one call of ours")
    p.add_argument("--sweep", default="", help="N,H,V: time ours' kernel config candidates")
    p.add_argument("--sweep-operands", default="bf16", choices=sweep.OPERANDS,
                   help="the sweep's operands: bf16, or one fp32 (the mixed candidates)")


def main(args, argv) -> int:
    if args.baseline:
        load_baseline(Path(args.baseline))
    args.methods = [m for m in (args.methods or (BASELINE_METHODS if args.baseline else
                                                 DEFAULT_METHODS)).split(",") if m]
    args.methods += [add_fb_variant(spec) for spec in args.fb_variant]
    args.protocols = [x for x in args.protocols.split(",") if x]
    args.phases = timing.parse_phases(args.parser, args.phases)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        args.parser.error(f"--methods: unknown {unknown}; choose from {sorted(METHODS)}")
    fixed = [f"--{name}" for name in ("temperature", "logits", "labels")
             if getattr(args, name) != args.parser.get_default(name)]
    if fixed and (args.sweep or args.host_profile or args.breakdown):
        args.parser.error(f"{', '.join(fixed)}: --sweep, --host-profile and --breakdown run at "
                          f"T = {TEMPERATURE} on iid inputs with uniform labels; these "
                          f"options apply to the method table and --diagnose")
    if args.device == "cuda" and not torch.cuda.is_available():
        args.parser.error("needs a CUDA GPU (--device cpu runs a smoke run without one)")
    if args.device == "cpu" and (args.diagnose or args.sweep
                                 or args.host_profile or args.breakdown):
        args.parser.error("--device cpu runs the method table only")
    run = Run(args, argv)
    log, out = run.log, run.out
    meta = {**run.meta, "triton": _version("triton"), "rounds": args.rounds,
            "burst_ms": args.burst_ms, "heat_s": args.heat_s, "floor_bursts": args.floor_bursts,
            "logits": args.logits,
            "labels": args.labels, "temperature": args.temperature,
            **({"sync_order": args.sync_order} if args.sync else {})}
    log(json.dumps(meta))
    sampler = ClockSampler(torch.cuda.current_device()) if args.device == "cuda" else \
        contextlib.nullcontext()
    with sampler as clocks:
        if args.diagnose:
            run.write("diagnose.json", {"meta": meta, **diagnose(shape(args.diagnose), args,
                                                                  clocks, log)})
            return 0
        if args.host_profile:
            run.write("host_profile.json", profiling.host_profile(*shape(args.host_profile), log))
            return 0
        if args.sweep:
            run.write(f"sweep_{args.sweep_operands}.json",
                      {"meta": meta, **sweep.sweep(shape(args.sweep), log, args.sweep_operands)})
            return 0
        skip = {s for s in args.skip.split(",") if s}
        rows, extra = [], {}
        for n, hdim, v in (shape(s) for s in args.shapes.split(";") if s):
            log(f"shape N={n} H={hdim} V={v}")
            ms = [m for m in args.methods if f"{m}@{n}" not in skip]
            rows += bench_shape(n, hdim, v, ms, args, clocks, log)
            for m in (m for m in ("ours", "base") if args.breakdown and m in ms):
                key = f"breakdown_{n}" if m == "ours" else f"breakdown_{m}_{n}"
                extra[key] = profiling.kernel_breakdown(n, hdim, v, log, METHODS[m]())
            run.write("results.json", {"meta": meta, "rows": rows, **extra})
    if args.grad_shape is None:
        args.grad_shape = "2048,{},{}".format(*shape(args.shapes.split(";")[0])[1:])
    if args.grad_shape and not args.no_grad_check and args.device == "cuda":
        try:
            checked = {m: METHODS[m]() for m in ("ours", "base") if m in METHODS}
            extra["grad_check"] = profiling.grad_check(checked, *shape(args.grad_shape), log)
        except Exception:
            log("grad check failed: " + traceback.format_exc()[-800:])
    run.write("results.json", {"meta": meta, "rows": rows, **extra})
    (out / "table.md").write_text(report.table(rows) + "\n")
    try:
        report.plot(rows, out / "bench.png", title=f"fused log-prob + entropy, bf16, "
                    f"T = {args.temperature:g}, {meta['device']}")
    except Exception as e:
        log(f"plot failed: {e}")
    log(report.table(rows))
    return 0
