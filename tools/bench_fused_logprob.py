#!/usr/bin/env python3
"""Benchmark the fused log-prob/entropy op against the GEMM floor, materialized logits and peers.

Per shape (N tokens, H hidden, V vocab; bf16, temperature 0.7), every method's forward (no
grad) and forward+backward (a loss on the per-token outputs), timed by the protocol of
tools/bench/timing.py: steady-state bursts of back-to-back calls, methods interleaved in a
rotated order, ratios to the GEMM floor taken within each round (median and range over
rounds), SM clock sampled in the background. Then each method's peak extra memory and its
max abs error vs fp64 on the first tokens. Methods (peers optional: tools/bench/peers.py):

  gemm             the floor: hidden @ W.T (fwd); that plus the two backward GEMMs (fb)
  materialized     fp32 logits / T -> log_softmax -> gather, entropy (autograd)
  ours             megatron_overlay.ops.linear_logprob_entropy (Triton kernels on CUDA)
  verl             verl.utils.kernel.linear_cross_entropy (log-prob + entropy)
  liger_scaled_ce  Liger's fused linear scaled-CE (log-prob + entropy; SM90 CuTe path)
  liger_flce       Liger's fused linear cross-entropy (scalar mean loss of hidden / T)
  cce              cut-cross-entropy linear_cross_entropy(hidden / T, reduction="none")

Writes results.json, table.md and bench.png (time and memory relative to the floor).

    python tools/bench_fused_logprob.py --out out/bench            # every method, 3 shapes
    python tools/bench_fused_logprob.py --shapes 8192,4096,151936 --methods gemm,ours
    python tools/bench_fused_logprob.py --diagnose 8192,4096,151936 --out out/diag
    python tools/bench_fused_logprob.py --sweep 8192,4096,151936 --out out/sweep
    python tools/bench_fused_logprob.py --replot out/bench/results.json --out out/bench
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.bench import profiling, protocols, report, sweep, timing  # noqa: E402
from tools.bench.clocks import ClockSampler  # noqa: E402
from tools.bench.inputs import (ACC_ROWS, SHAPES, TEMPERATURE, fp64_reference,  # noqa: E402
                                loss_coeffs, make_inputs, max_err)
from tools.bench.memory import peak_extra_gib  # noqa: E402
from tools.bench.methods import BUILTIN  # noqa: E402
from tools.bench.peers import PEERS  # noqa: E402

METHODS = {**BUILTIN, **PEERS}
DEFAULT_METHODS = "gemm,materialized,ours,verl,liger_scaled_ce,liger_flce,cce"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _build(methods, log):
    objs = {}
    for name in methods:
        try:
            objs[name] = METHODS[name]()
        except Exception as e:  # a peer that is not installed
            log(f"  {name}: unavailable ({type(e).__name__}: {str(e)[:200]})")
    return objs


def bench_shape(n, hdim, v, methods, args, clocks, log):
    """Rows (one per method) for one shape: times, ratios, peaks, errors."""
    sets, w = make_inputs(n, hdim, v, seed=n, device=args.device, logits=args.logits)
    a, b = loss_coeffs(n, w.device)
    ref_lp, ref_ent = fp64_reference(sets[0][0], w, sets[0][1], min(ACC_ROWS, n))
    objs = _build(methods, log)
    rows = {m: {"N": n, "H": hdim, "V": v, "method": m, "outputs": o.outputs}
            for m, o in objs.items()}
    phases = (("fwd", [(h, w, y) for h, y in sets], torch.no_grad),
              ("fb", [(h, w, y, a, b) for h, y in sets], torch.enable_grad))
    for phase, inputs, ctx in phases:
        live = {m: getattr(o, phase) for m, o in objs.items()
                if not (phase == "fb" and m in args.fwd_only)}
        with ctx():
            got = timing.interleaved(live, inputs, args.rounds, burst_ms=args.burst_ms,
                                     heat_s=args.heat_s, clocks=clocks, log=log,
                                     cuda=args.device == "cuda")
        ratios = timing.paired_ratios(got, "gemm")
        for m, t in got.items():
            rec = timing.summarize(t)
            if "error" in rec:
                rows[m][f"{phase}_error"] = rec["error"]
                continue
            rows[m].update({f"{phase}_ms": rec["ms"], f"{phase}_ms_rounds": rec["ms_rounds"],
                            f"{phase}_calls": rec["calls"], f"{phase}_sm_mhz": rec["sm_mhz"],
                            f"{phase}_watts": rec["watts"], f"{phase}_host_ms": rec["host_ms"]})
            if m in ratios:
                (rows[m][f"{phase}_x"], rows[m][f"{phase}_x_min"],
                 rows[m][f"{phase}_x_max"]) = ratios[m]
        for m in got:
            if got[m].error:
                continue
            try:
                with ctx():
                    rows[m][f"{phase}_peak_gib"] = peak_extra_gib(live[m], inputs[0])
                    if phase == "fwd":
                        out = objs[m].fwd(*inputs[0])
                        lp, ent = out if isinstance(out, tuple) else (None, None)
                        rows[m]["lp_err"], rows[m]["ent_err"] = (max_err(lp, ref_lp),
                                                                 max_err(ent, ref_ent))
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
    sets, w = make_inputs(n, hdim, v, seed=n, logits=args.logits)
    a, b = loss_coeffs(n, w.device)
    objs = _build(args.methods, log)
    out = {"shape": list(shape)}
    for phase, inputs, ctx, protos in (
            ("fwd", [(h, w, y) for h, y in sets], torch.no_grad, args.protocols),
            ("fb", [(h, w, y, a, b) for h, y in sets], torch.enable_grad,
             [p for p in args.protocols if p != "graph"])):
        fns = {m: getattr(o, phase) for m, o in objs.items()}
        with ctx():
            out[phase] = [protocols.compare(fns, inputs, "gemm", args.rounds, args.burst_ms,
                                            clocks, protos, log=lambda s: log(f"{phase}{s}"))
                          for _ in range(2)]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/bench_fused_logprob")
    p.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES),
                   help="N,H,V[;N,H,V...]")
    p.add_argument("--methods", default=DEFAULT_METHODS, help=f"of {','.join(METHODS)}")
    p.add_argument("--rounds", "--repeats", type=int, default=7,
                   help="timed rounds (each times every method once)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a smoke run of the tool's code on tiny shapes (host-clock "
                        "timings, no memory figures), not a benchmark")
    p.add_argument("--logits", default="iid", choices=["iid", "zipf"],
                   help="the inputs' logit distribution (tools/bench/inputs.py)")
    p.add_argument("--burst-ms", type=float, default=300.0,
                   help="GPU work per timed burst of back-to-back calls")
    p.add_argument("--heat-s", type=float, default=2.0,
                   help="seconds of the first method before timing (steady power state)")
    p.add_argument("--skip", default="", help="method@N pairs to skip, e.g. materialized@32768")
    p.add_argument("--fwd-only", default="", help="methods timed forward only")
    p.add_argument("--no-grad-check", action="store_true")
    p.add_argument("--breakdown", action="store_true", help="per-kernel times of ours (profiler)")
    p.add_argument("--diagnose", default="", help="N,H,V: compare timing protocols there")
    p.add_argument("--protocols", default="old_tool,single,cold,burst,burst_fixed_input,"
                                          "burst_fixed_order,graph")
    p.add_argument("--timeline", default="", help="N,H,V: GPU idle gaps of one fb step of ours")
    p.add_argument("--host-profile", default="", help="N,H,V: host-side ops of one call of ours")
    p.add_argument("--sweep", default="", help="N,H,V: time ours' kernel config candidates")
    p.add_argument("--replot", default="", help="results.json: redraw table and figure, no GPU")
    args = p.parse_args(argv)
    args.fwd_only = {m for m in args.fwd_only.split(",") if m}
    args.methods = [m for m in args.methods.split(",") if m]
    args.protocols = [x for x in args.protocols.split(",") if x]
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        p.error(f"--methods: unknown {unknown}; choose from {sorted(METHODS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        rows = json.loads(Path(args.replot).read_text())["rows"]
        (out / "table.md").write_text(report.table(rows) + "\n")
        print(report.table(rows))
        try:
            report.plot(rows, out / "bench.png")
        except ImportError as e:  # the figure needs matplotlib; the table does not
            print(f"no figure: {e}", file=sys.stderr)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("needs a CUDA GPU (only --replot and --device cpu run without one)")
    if args.device == "cpu" and (args.diagnose or args.timeline or args.sweep
                                 or args.host_profile or args.breakdown):
        p.error("--device cpu runs the method table only")
    logf = open(out / "log.txt", "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    meta = {"device": torch.cuda.get_device_name() if args.device == "cuda" else
            "cpu (smoke run: host-clock timings, not a benchmark)", "torch": torch.__version__,
            "triton": _version("triton"), "temperature": TEMPERATURE,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": sys.argv[1:] if argv is None else list(argv),
            "rounds": args.rounds, "burst_ms": args.burst_ms, "heat_s": args.heat_s,
            "logits": args.logits}
    log(json.dumps(meta))
    shape_of = lambda s: tuple(int(x) for x in s.split(","))  # noqa: E731
    sampler = ClockSampler(torch.cuda.current_device()) if args.device == "cuda" else \
        contextlib.nullcontext()
    with sampler as clocks:
        if args.diagnose:
            res = diagnose(shape_of(args.diagnose), args, clocks, log)
            (out / "diagnose.json").write_text(json.dumps({"meta": meta, **res}, indent=1))
            return 0
        if args.host_profile:
            res = profiling.host_profile(*shape_of(args.host_profile), log)
            (out / "host_profile.json").write_text(json.dumps(res, indent=1))
            return 0
        if args.timeline:
            res = profiling.timeline(*shape_of(args.timeline), log)
            (out / "timeline.json").write_text(json.dumps(res, indent=1))
            return 0
        if args.sweep:
            res = sweep.sweep(shape_of(args.sweep), log)
            (out / "sweep.json").write_text(json.dumps({"meta": meta, **res}, indent=1))
            return 0
        skip = {s for s in args.skip.split(",") if s}
        rows, extra = [], {}
        for n, hdim, v in (shape_of(s) for s in args.shapes.split(";") if s):
            log(f"shape N={n} H={hdim} V={v}")
            ms = [m for m in args.methods if f"{m}@{n}" not in skip]
            rows += bench_shape(n, hdim, v, ms, args, clocks, log)
            if args.breakdown and "ours" in ms:
                extra[f"breakdown_{n}"] = profiling.kernel_breakdown(n, hdim, v, log)
            (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, **extra},
                                                         indent=1))
    if not args.no_grad_check and args.device == "cuda":
        try:
            n, hdim, v = shape_of(args.shapes.split(";")[0])
            extra["grad_check"] = profiling.grad_check(hdim, v, 2048, log)
        except Exception:
            log("grad check failed: " + traceback.format_exc()[-800:])
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, **extra}, indent=1))
    (out / "table.md").write_text(report.table(rows) + "\n")
    try:
        report.plot(rows, out / "bench.png")
    except Exception as e:
        log(f"plot failed: {e}")
    log(report.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
