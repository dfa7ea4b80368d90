"""The distillation ops on one GPU (top-k fwd, log-probs at ids fwd and fwd+bwd) beside the
log-prob op's, in one run (issue 20).

Per shape (N tokens, H hidden, V vocab; bf16, T = 0.7) and k, against the GEMM floor (fb:
with the two backward GEMMs): topk_ours (linear_topk_logprobs) and topk_torch (torch.topk
of fp32 log_softmax) forward; at_ours (linear_logprobs_at at ids [N, k]) forward;
at_ours_fb and at_torch_fb (log_softmax gather) forward+backward; logprob_ours and
logprob_ours_fb (linear_logprob_entropy at labels = the ids' first column, copied once
outside the timed calls into an [N] tensor as a caller holds labels; loss
sum(log_probs) + sum(entropy)), which take no k: timed once a shape, in the first k's
row. Timed by tools/bench/timing.py (bursts; ``host_ms``: a call's enqueue time over a
burst's first calls, timing.HOST_CALLS), with ``--sync`` also as single synchronized
calls (``sync_ms``, ``sync_x``: the other protocol; ``sync_host_ms``: a synchronized
call's enqueue time, the GPU idle); the floor's bursts (blocks of single
calls) run before every method's and after the last, and each round's ratios are over
the median of them (``--floor-bursts once``: one floor burst a round); then peak extra
memory (for top-k, also beyond its outputs) and checks of the first rows against fp64.
``--baseline DIR``: DIR/megatron_overlay_base (the package of another commit, as for
``op --baseline``) runs beside ours as topk_base / at_base / at_base_fb, the counterparts
of the selected methods, and each of ours gets ``vs_base``: its time over base's, paired
per round, one burst against one (host times compare only within one process).
``--device cpu``: a smoke run on tiny shapes (host-clock timings, no memory figures).
Each run also writes table.md (``table``: the ratios of both protocols, host time and
extra memory, per op and shape, headed by the machine and the command); ``--table
RESULTS.json`` prints that table for an earlier run's results (writes nothing).

    python -m tools.bench distill --sync --out out/distill   # both protocols
    python -m tools.bench distill --sweep 8192,4096,151936,32 --sweep-splits 1,2,4 --ks 32 \
        --shapes 8192,4096,151936 --out out/sweep          # + configs and split counts
    python -m tools.bench distill --device cpu --shapes 64,32,512 --ks 1,4 --out out/smoke
    python -m tools.bench distill --table out/distill/results.json
    git archive REV megatron_overlay | tar -x -C /tmp/base && \
        mv /tmp/base/megatron_overlay /tmp/base/megatron_overlay_base
    python -m tools.bench distill --baseline /tmp/base --phases fwd --ks 8 --out out/vs_base
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex

import torch

from megatron_overlay import ops as ours_ops
from megatron_overlay.ops import batch_invariance, linear_logprobs_at, linear_topk_logprobs

from . import timing
from .clocks import ClockSampler
from .inputs import SHAPES, TEMPERATURE, distill_inputs, shape
from .methods import import_baseline, peak_extra_gib, read_pending_label_checks
from .report import Run, markdown
from .timing import parse_phases, timing_options

KS = [1, 8, 32]
CHECK_ROWS = 256


def gemm_fwd(h, w, _ids):
    return h @ w.T


def gemm_fb(h, w, _ids):
    logits = h @ w.T
    return logits @ w, logits.T @ h


def topk_ours(k, ops=ours_ops):
    def run(h, w, _ids):
        with torch.no_grad():
            return ops.linear_topk_logprobs(h, w, k, temperature=TEMPERATURE)
    return run


def topk_ours_variant(k):
    """topk_ours with batch invariance off ($MEGATRON_OVERLAY_BATCH_INVARIANT=0 for the
    call): what invariance costs, beside topk_ours (--invariance-ab)."""
    def run(h, w, _ids):
        before = os.environ.get(batch_invariance.ENV)
        os.environ[batch_invariance.ENV] = "0"
        try:
            with torch.no_grad():
                return linear_topk_logprobs(h, w, k, temperature=TEMPERATURE)
        finally:
            if before is None:
                os.environ.pop(batch_invariance.ENV)
            else:
                os.environ[batch_invariance.ENV] = before
    return run


def topk_torch(k):
    def run(h, w, _ids):
        with torch.no_grad():
            return torch.topk(torch.log_softmax((h @ w.T).float() / TEMPERATURE, dim=-1), k)
    return run


def at_ours(ops=ours_ops):
    def run(h, w, ids):
        with torch.no_grad():
            return ops.linear_logprobs_at(h, w, ids, temperature=TEMPERATURE)
    return run


def at_ours_fb(ops=ours_ops):
    def run(h, w, ids):
        h, w = h.detach().requires_grad_(), w.detach().requires_grad_()
        lp, _ = ops.linear_logprobs_at(h, w, ids, temperature=TEMPERATURE)
        lp.sum().backward()
        return h.grad, w.grad
    return run


_LABELS: dict = {}  # id(ids) -> (ids, its first column as a contiguous [N] tensor)


def labels_of(ids: torch.Tensor) -> torch.Tensor:
    """The log-prob methods' labels: ``ids[:, 0]`` copied once per ids tensor (in the
    warm-up), not in each timed call. A strided view would make the op copy it (one more
    torch launch before its kernel: ~0.1 ms of a synchronized call on an H200 host,
    docs/BENCHMARKS.md pass 7), which the benchmark's slicing causes, not a caller."""
    held = _LABELS.get(id(ids))
    if held is None or held[0] is not ids:
        if len(_LABELS) > 16:  # older shapes' inputs
            _LABELS.clear()
        held = _LABELS[id(ids)] = (ids, ids[:, 0].contiguous())
    return held[1]


def logprob_ours(ops=ours_ops):
    def run(h, w, ids):
        with torch.no_grad():
            return ops.linear_logprob_entropy(h, w, labels_of(ids), temperature=TEMPERATURE)
    return run


def logprob_ours_fb(ops=ours_ops):
    def run(h, w, ids):
        h, w = h.detach().requires_grad_(), w.detach().requires_grad_()
        lp, ent = ops.linear_logprob_entropy(h, w, labels_of(ids), temperature=TEMPERATURE)
        (lp.sum() + ent.sum()).backward()
        return h.grad, w.grad
    return run


def at_torch_fb(h, w, ids):
    h, w = h.detach().requires_grad_(), w.detach().requires_grad_()
    lp = torch.log_softmax((h @ w.T).float() / TEMPERATURE, dim=-1).gather(1, ids)
    lp.sum().backward()
    return h.grad, w.grad


# Each method: name -> (k -> a callable of (hidden, weight, ids)); the forward-only ones
# against the GEMM, the others (fwd+bwd) against the 3-GEMM floor.
FORWARD_ONLY = ("topk_ours", "topk_ours_variant", "topk_torch", "at_ours", "topk_base",
                "at_base", "logprob_ours", "logprob_base")
# the methods that take no k: timed at the first k only
K_FREE = ("logprob_ours", "logprob_ours_fb", "logprob_base", "logprob_base_fb")
# --baseline: base's method -> ours it stands beside
BASE_OF = {"topk_base": "topk_ours", "at_base": "at_ours", "at_base_fb": "at_ours_fb",
           "logprob_base": "logprob_ours", "logprob_base_fb": "logprob_ours_fb"}


def _methods(args, check_only: bool = False) -> dict:
    every = {"topk_ours": topk_ours, "topk_torch": topk_torch,
             "at_ours": lambda k: at_ours(), "at_ours_fb": lambda k: at_ours_fb(),
             "at_torch_fb": lambda k: at_torch_fb, "logprob_ours": lambda k: logprob_ours(),
             "logprob_ours_fb": lambda k: logprob_ours_fb()}
    if args.invariance_ab:
        every["topk_ours_variant"] = topk_ours_variant
    selected = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in selected if m not in every]
    if unknown:  # topk_ours_variant comes with --invariance-ab; base's with --baseline
        args.parser.error(f"--methods: unknown {unknown}; choose from {', '.join(every)} "
                          f"(base's counterparts of those come with --baseline)")
    if check_only:
        return {}
    if args.baseline:
        base = importlib.import_module(f"{import_baseline(args.baseline)}.ops")
        every.update(topk_base=lambda k: topk_ours(k, base), at_base=lambda k: at_ours(base),
                     at_base_fb=lambda k: at_ours_fb(base),
                     logprob_base=lambda k: logprob_ours(base),
                     logprob_base_fb=lambda k: logprob_ours_fb(base))
        selected += [name for name, ours in BASE_OF.items() if ours in selected]
    return {name: make for name, make in every.items()
            if ("fwd" if name in FORWARD_ONLY else "fb") in args.phases
            and (name == "topk_ours_variant" or name in selected)}


def check(hidden, weight, k) -> dict:
    """Top-k ids and log-probs of the first rows against fp64 (ties are measure zero here)."""
    h, w = hidden[:CHECK_ROWS], weight
    with torch.no_grad():
        out = linear_topk_logprobs(h, w, k, temperature=TEMPERATURE)
        ref = torch.log_softmax((h.double() @ w.double().T) / TEMPERATURE, dim=-1)
        r_vals, r_ids = ref.topk(k, dim=1)
        at, _ = linear_logprobs_at(h, w, r_ids, temperature=TEMPERATURE)
    return {"ids_equal_frac": (out.topk_ids == r_ids).float().mean().item(),
            "topk_max_err": (out.topk_log_probs.double() - r_vals).abs().max().item(),
            "at_max_err": (at.double() - r_vals).abs().max().item()}


def _timed(fns, args, clocks, log, reference):
    """name -> Timing of fns (each takes an input-set index), interleaved (each burst
    ``reference``'s bursts between the others' unless --floor-bursts once)."""
    return timing.interleaved(fns, [(0,), (1,)], args.rounds, burst_ms=args.burst_ms,
                              heat_s=args.heat_s, clocks=clocks, log=log,
                              cuda=args.device == "cuda",
                              bracket=reference if args.floor_bursts == "between"
                              else None, settle=read_pending_label_checks)


def run_shape(n, h, v, ks, args, clocks, results, log):
    sets = [distill_inputs(n, h, v, max(ks), seed, args.device) for seed in (0, 1)]
    per_k = {k: [(a, b, c[:, :k].contiguous()) for a, b, c in sets] for k in ks}

    def bind(fn, k):
        return lambda i: fn(*per_k[k][i])

    methods = _methods(args)
    fwd = {"gemm": bind(gemm_fwd, ks[0])}
    # the 3-GEMM floor only where a fwd+bwd method is timed against it
    fb = {"gemm_fb": bind(gemm_fb, ks[0])} if any(
        name not in FORWARD_ONLY for name in methods) else {}
    for k in ks:
        for base, make in methods.items():
            if base not in K_FREE or k == ks[0]:
                (fwd if base in FORWARD_ONLY else fb)[f"{base}@{k}"] = bind(make(k), k)
    with torch.no_grad():
        got = _timed(fwd, args, clocks, log, "gemm")
    ratios = timing.paired_ratios(got, "gemm")
    if fb:
        got_fb = _timed(fb, args, clocks, log, "gemm_fb")
        got.update(got_fb)
        ratios.update(timing.paired_ratios(got_fb, "gemm_fb"))
    single, single_ratios = {}, {}
    if args.sync:  # the same methods as single synchronized calls (the host's time shows)
        for fns, ref in ((fwd, "gemm"), (fb, "gemm_fb")) if fb else ((fwd, "gemm"),):
            with torch.no_grad() if ref == "gemm" else contextlib.nullcontext():
                t, r = timing.synchronized({name: fn for name, fn in fns.items()
                                            if name in got and not got[name].error},
                                           [(0,), (1,)], args.rounds, ref, clocks=clocks,
                                           log=log, cuda=args.device == "cuda",
                                           calls=args.sync_calls, order=args.sync_order,
                                           bracket=args.floor_bursts == "between")
            single.update(t)
            single_ratios.update(r)
    for name in ("gemm", "gemm_fb") if fb else ("gemm",):
        results.append({"shape": [n, h, v], "method": name, **timing.summarize(got[name]),
                        **({"sync_ms": single[name].median_ms,
                            "sync_calls": len(single[name].ms) * single[name].calls,
                            "sync_host_ms": single[name].median_host_ms}
                           if name in single else {})})
        # a single synchronized GEMM has run 2-4% faster than its bursts on an H200
        # (docs/BENCHMARKS.md, pass 7): the synchronized ratios' reference moves with it
        single_ms = f"  single {single[name].median_ms:8.2f} ms" if name in single else ""
        log(f"{n}x{h}x{v} {name:>12}: {got[name].median_ms or 0:8.2f} ms{single_ms}")
    for k in ks:
        row = {"shape": [n, h, v], "k": k}
        try:
            row.update(check(per_k[k][0][0], per_k[k][0][1], k))
        except Exception as err:  # noqa: BLE001  (reported, the timing still runs)
            row["check_error"] = repr(err)
        for base, make in methods.items():
            if f"{base}@{k}" not in got:  # a phase not run
                continue
            fn = make(k)
            t = got[f"{base}@{k}"]
            if t.error:
                row[base] = {"error": t.error}
                continue
            rec = timing.summarize(t)
            rec["x_floor"], rec["x_floor_min"], rec["x_floor_max"] = ratios[f"{base}@{k}"]
            if f"{base}@{k}" in single_ratios:
                rec["sync_ms"] = single[f"{base}@{k}"].median_ms
                rec["sync_x"] = list(single_ratios[f"{base}@{k}"])
                rec["sync_host_ms"] = single[f"{base}@{k}"].median_host_ms
            counterpart = next((f"{b}@{k}" for b, o in BASE_OF.items() if o == base), None)
            if counterpart in got and not got[counterpart].error:  # --baseline: ours / base
                pair = {f"{base}@{k}": t, counterpart: got[counterpart]}
                rec["vs_base"] = list(timing.paired_ratios(pair, counterpart)[f"{base}@{k}"])
            try:
                mem = peak_extra_gib(fn, per_k[k][0])
                mem = None if mem is None else mem * 1024
            except Exception as err:  # noqa: BLE001
                mem, rec["peak_error"] = None, repr(err)[:300]
            out_mib = n * k * 12 / 2 ** 20 if base.startswith("topk") else 0.0
            kind = "" if base in K_FREE else f"k={k} "
            rec["peak_extra_mib"] = mem
            rec["extra_beyond_outputs_mib"] = None if mem is None else mem - out_mib
            row[base] = rec
            sync = f"  sync {rec['sync_x'][0]:5.3f}x" if "sync_x" in rec else ""
            sync += f"  vs base {rec['vs_base'][0]:5.3f}x" if "vs_base" in rec else ""
            log(f"{n}x{h}x{v} {kind}{base:>15}: {rec['ms']:8.2f} ms  {rec['x_floor']:5.3f}x "
                f"floor ({rec['x_floor_min']:.3f}-{rec['x_floor_max']:.3f}){sync}  host "
                f"{rec['host_ms'] or 0:.3f} ms  peak +"
                f"{'-' if mem is None else format(mem, '.1f')} MiB")
        results.append(row)
        checks = {name: value for name, value in row.items()
                  if name not in ("shape", "k") and not isinstance(value, dict)}
        log(f"   check: {json.dumps(checks)}")


def sweep(n, h, v, k, args, clocks, log, split_counts=()) -> list:
    """The top-k kernel's candidate configs (triton_topk.CANDIDATES), forward stage only,
    then the default config at each of ``split_counts`` vocab splits (default: the host's
    choice); all interleaved with the GEMM."""
    from megatron_overlay.ops.kernels import triton_topk

    sets = [distill_inputs(n, h, v, 1, seed) for seed in (0, 1)]
    fns = {"gemm": lambda i: gemm_fwd(*sets[i])}
    tries = [(cfg, None) for cfg in triton_topk.CANDIDATES]
    tries += [(triton_topk.CANDIDATES[0], s) for s in split_counts]
    for cfg, splits in tries:
        def run(i, cfg=cfg, splits=splits):
            return triton_topk.topk_stats(sets[i][0], sets[i][1], None, 1 / TEMPERATURE,
                                          False, k, config=cfg, splits=splits)
        fns[cfg.name() + ("" if splits is None else f" splits={splits}")] = run
    with torch.no_grad():
        got = _timed(fns, args, clocks, log, "gemm")
    ratios = timing.paired_ratios(got, "gemm")
    rows = []
    for name, t in got.items():
        if name == "gemm" or t.error:
            continue
        rows.append({"shape": [n, h, v], "k": k, "config": name, "ms": t.median_ms,
                     "x_gemm": ratios[name][0], "x_gemm_range": list(ratios[name][1:])})
        log(f"sweep {n}x{h}x{v} k={k} {name:>42}: {t.median_ms:8.2f} ms "
            f"{ratios[name][0]:5.3f}x gemm")
    return rows

# table.md's rows: method -> its label ({k}: the row's k)
LABELS = {"logprob_ours": "log-prob fwd", "logprob_ours_fb": "log-prob fwd+bwd",
          "topk_ours": "top-k k = {k} fwd", "topk_ours_variant": "top-k k = {k} fwd, not invariant",
          "topk_torch": "torch.topk k = {k} fwd", "at_ours": "at ids (k = {k}) fwd",
          "at_ours_fb": "at ids (k = {k}) fwd+bwd", "at_torch_fb": "torch at ids (k = {k}) fwd+bwd",
          "logprob_base": "base: log-prob fwd", "logprob_base_fb": "base: log-prob fwd+bwd",
          "topk_base": "base: top-k k = {k} fwd", "at_base": "base: at ids (k = {k}) fwd",
          "at_base_fb": "base: at ids (k = {k}) fwd+bwd"}


def table(run: dict) -> str:
    """A run's results.json as markdown: which machine and command, then per op (rows) and
    shape (columns) the ratio to the GEMM floor in both protocols (bursts / single
    synchronized calls, each a median over the rounds), then host time a call and extra
    memory."""
    # a --sweep row ({"shape", "k", "config", "ms", ...}) is a kernel config's time, not an op's
    results = [r for r in run["results"] if "shape" in r and "config" not in r]
    shapes = list(dict.fromkeys(tuple(r["shape"]) for r in results))
    ops: dict = {}   # (method, k) -> {shape: record}, in the order the run logged them
    floor: dict = {}  # (gemm method, shape) -> record
    for r in results:
        if "method" in r:
            floor[r["method"], tuple(r["shape"])] = r
            continue
        for name, rec in r.items():
            if isinstance(rec, dict) and name in LABELS:
                ops.setdefault((name, r["k"]), {})[tuple(r["shape"])] = rec
    order = list(LABELS)
    rows = sorted(ops, key=lambda mk: (order.index(mk[0]), mk[1]))  # LABELS' order, then k

    def ratio(rec, key):
        got = rec.get(key)
        return "" if got is None else format(got[0] if isinstance(got, list) else got, ".3f")

    def cells(fmt):
        return [[LABELS[m].format(k=k)] + [fmt(ops[m, k][s]) if s in ops[m, k] else ""
                                           for s in shapes] for m, k in rows]

    def times(rec):
        if "error" in rec:
            return "error"
        sync = ratio(rec, "sync_x")
        return ratio(rec, "x_floor") + (f" / {sync}" if sync else "")

    # runs since pass 31's harness keep the synchronized calls' host time too (the GPU idle)
    idle_host = any("sync_host_ms" in rec for per in ops.values() for rec in per.values())

    host_keys = ("host_ms", "sync_host_ms") if idle_host else ("host_ms",)

    def hosts(rec):  # "burst" or "burst / synchronized", ms
        return " / ".join("-" if rec.get(key) is None else f"{rec[key]:.2f}"
                          for key in host_keys)

    def host_memory(rec):
        if "error" in rec:
            return "error"
        mib = rec.get("extra_beyond_outputs_mib")
        return hosts(rec) + " / " + ("-" if mib is None else f"{mib:.1f}")

    def floor_rows(cell, suffix=""):
        # the floor's rows of a table (fwd, fwd+bwd), where the run timed them
        return [[{"gemm": "the floor, fwd", "gemm_fb": "the floor, fwd+bwd"}[g] + suffix]
                + [cell(g, s) for s in shapes] for g in ("gemm", "gemm_fb")
                if any((g, s) in floor for s in shapes)]

    def floor_host(name, s):
        # the bare GEMMs' own host time: what a host this fast takes for one cuBLAS call,
        # beside which the ops' host times (and the small calls' synchronized ratios) read
        r = floor.get((name, s))
        return "" if r is None or r.get("host_ms") is None else hosts(r) + " / -"

    def gemm_ms(name, s):
        r = floor.get((name, s))
        if r is None or r.get("ms") is None:
            return ""
        return f"{r['ms']:.3f}" + (f" / {r['sync_ms']:.3f}" if r.get("sync_ms") else "")

    def clock(rec):
        if rec.get("sm_mhz") is None:
            return ""
        return f"{rec['sm_mhz']:.0f}" + (f" / {rec['watts']:.0f}" if rec.get("watts") else "")

    clocked = any(r.get("sm_mhz") is not None for r in floor.values())
    head = ["N, H, V:"] + [", ".join(map(str, s)) for s in shapes]
    synced = any("sync_x" in rec for per in ops.values() for rec in per.values())
    order = run.get("sync_order", "blocks")
    protocol = ("bursts of back-to-back calls / single synchronized calls " + (
        "(blocks: each method's calls after one of its own)" if order == "blocks" else
        f"({order}: one call of each method in turn)") if synced
        else "bursts of back-to-back calls")
    # runs that name no floor schedule (through pass 19) ran one floor burst (block) a
    # round; pass 20's first two ("pairing": "bracket") paired each burst with the two
    # around it. Single calls in the interleaved order are never bracketed.
    block = " (block)" if synced and order == "blocks" else ""
    if run.get("floor_bursts") == "between":
        protocol += (f"; the floor's burst{block} before every method's and after the "
                     f"last, each ratio over the median of its round's")
    elif run.get("pairing") == "bracket":
        protocol += ("; each burst (block) over the mean of the floor's just before and "
                     "after it")
    else:
        protocol += "; each burst (block) over the floor's one of the same round"
    command = "python -m tools.bench " + shlex.join(run.get("argv", []))
    return "\n".join([
        f"{run.get('device')}, torch {run.get('torch')}, {run.get('date')}, "
        f"T = {run.get('temperature')}, {run.get('rounds')} rounds; `{command}`",
        "",
        f"x the floor of the same run (fwd: the bare bf16 GEMM, fwd+bwd: it and the two "
        f"gradient GEMMs), {protocol}; median over the rounds:",
        "",
        markdown(head, cells(times) + floor_rows(gemm_ms, ": ms")),
        "",
        "Host time a call in ms (a burst's first calls" + (
            ", the GPU busy / a synchronized call's, the GPU idle" if idle_host else "") +
        ") / peak extra memory in MiB (top-k: beyond its outputs; fwd+bwd: the gradients "
        "included; the floor: its GEMMs' host time, the host's speed):",
        "",
        markdown(head, cells(host_memory) + floor_rows(floor_host)),
    ] + ([
        "",
        "SM clock in MHz / board power in W, medians over the bursts (where NVML read them):",
        "",
        markdown(head, cells(clock) + floor_rows(
            lambda g, s: clock(floor[g, s]) if (g, s) in floor else "")),
    ] if clocked else [])) + "\n"


def add_arguments(p):
    p.add_argument("--shapes", nargs="*", default=None, help="N,H,V ...")
    p.add_argument("--ks", default=",".join(map(str, KS)))
    timing_options(p)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a smoke run of the tool's code, not a benchmark")
    p.add_argument("--methods", default="topk_ours,topk_torch,at_ours,at_ours_fb,at_torch_fb,"
                                        "logprob_ours,logprob_ours_fb",
                   help="comma-separated: topk_ours, topk_torch, at_ours, logprob_ours "
                        "(forward), at_ours_fb, at_torch_fb, logprob_ours_fb "
                        "(forward+backward)")
    p.add_argument("--phases", default="fwd,fb",
                   help="fwd,fb (default, or both), fwd: the forward-only methods alone, or "
                        "fb: the forward+backward ones alone")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="DIR/megatron_overlay_base (another commit's package): its ops beside "
                        "ours (topk_base, at_base, at_base_fb, logprob_base, logprob_base_fb) "
                        "and ours' vs_base ratios")
    p.add_argument("--invariance-ab", action="store_true",
                   help="also topk_ours_variant: topk_ours with batch invariance off")
    p.add_argument("--sync", action="store_true",
                   help="also time each method as single synchronized calls (--sync-calls, "
                        "default 4 x --rounds; paired ratios: sync_x), beside the bursts")
    p.add_argument("--sweep", default=None, metavar="N,H,V,k",
                   help="also time the top-k kernel's candidate configs at this shape")
    p.add_argument("--sweep-splits", default="", metavar="S,S,...",
                   help="with --sweep: also these vocab split counts (default config)")
    p.add_argument("--table", default=None, metavar="RESULTS.json",
                   help="print table.md of an earlier run's results.json and exit (no GPU, "
                        "writes nothing)")


def main(args, argv) -> int:
    if args.table:  # before Run(): a read-only command makes no folder
        try:
            text = open(args.table).read()
        except OSError as err:
            args.parser.error(f"--table: cannot read {args.table} ({err.strerror})")
        try:
            print(table(json.loads(text)), end="")
        except (ValueError, KeyError, TypeError) as err:
            args.parser.error(f"--table {args.table}: not a distill results.json ({err!r})")
        return 0
    args.phases = parse_phases(args.parser, args.phases)
    _methods(args, check_only=True)  # a bad --methods is an argument error before any work
    if args.device == "cuda" and not torch.cuda.is_available():
        args.parser.error("needs a CUDA GPU (--device cpu runs a smoke run without one)")
    if args.device == "cpu" and args.sweep:
        args.parser.error("--sweep times the Triton kernel: CUDA only")
    shapes = [shape(s) for s in args.shapes] if args.shapes else SHAPES
    ks = [int(k) for k in args.ks.split(",")]
    run = Run(args, argv)
    results: list = []
    meta = {**run.meta, "rounds": args.rounds, "burst_ms": args.burst_ms,
            "floor_bursts": args.floor_bursts,
            **({"sync_order": args.sync_order} if args.sync else {})}

    def log(line: str) -> None:
        run.log(line)
        run.write("results.json", {**meta, "results": results})

    sampler = ClockSampler(torch.cuda.current_device()) if args.device == "cuda" else \
        contextlib.nullcontext()
    with sampler as clocks:
        if args.sweep:
            n, h, v, k = shape(args.sweep)
            split_counts = [int(x) for x in args.sweep_splits.split(",") if x]
            results.extend(sweep(n, h, v, k, args, clocks, log, split_counts))
        text = ""
        for n, h, v in shapes:
            run_shape(n, h, v, ks, args, clocks, results, log)
            # after each shape: a run cut short (a device call's time limit) keeps its table
            text = table({**meta, "results": results})
            (run.out / "table.md").write_text(text)
            if args.device == "cuda":
                torch.cuda.empty_cache()
    log(text)
    log("done")
    return 0
