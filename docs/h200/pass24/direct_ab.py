"""Pass 24: this pass's host-side changes off and on in one process, alternated.

"Off" is the tree before them (af73d58) in behaviour: ``launch.direct = False`` (every hit
through ``compiled.run``) and ``LogprobParams.of`` building the options afresh (as
``LogprobParams(...)`` did); "on" is this tree.

1. bits: each op's outputs (and gradients) with the changes off and on, on fresh
   copies of the inputs (new addresses: the descriptor cache misses, then hits), bf16 and
   fp32 hidden states with a bf16 weight, N = 256 and 1029: equal bit for bit or not;
2. host time: each op's forward (and the log-prob fwd+bwd) at N = 256 and 8192, H = 4096,
   V = 151936, bf16, T = 0.7: a call's host time in a burst (the 2nd-8th of 8 back-to-back
   calls), the time inside ``launch`` a call (every kernels module's ``launch`` wrapped by
   a timer), the time from the call to its first launch, and a single synchronized
   call's time x the bare GEMM's; ROUNDS rounds, off and on alternated in each; medians;
3. cProfile of the 256-token log-prob forward, top-k (k = 8) and log-prob fwd+bwd with
   the changes on: the functions by own time, us a call.

    PYTHONPATH=. python docs/h200/pass24/direct_ab.py OUT.json     (one GPU)

($AB_ROUNDS: the rounds, default 9; $AB_BITS_N: the bits' token counts, default 256,1029.)
"""
import cProfile
import json
import os
import pstats
import statistics
import sys
import time

import torch

from megatron_overlay import ops
from megatron_overlay.ops import kernels as kernels_pkg  # noqa: F401
from megatron_overlay.ops.kernels import launch as launch_mod
from megatron_overlay.ops.params import LogprobParams
from tools.bench.inputs import distill_inputs

ROUNDS, BURST = int(os.environ.get("AB_ROUNDS", 9)), 8
BITS_N = [int(n) for n in os.environ.get("AB_BITS_N", "256,1029").split(",")]
H, V = 4096, 151936


_CACHED_OF = LogprobParams.__dict__["of"]
_FRESH_OF = classmethod(lambda cls, **options: cls(**options))


def set_direct(on):
    """This pass's changes on (this tree) or off (the tree before, in behaviour)."""
    launch_mod.direct = on
    LogprobParams.of = _CACHED_OF if on else _FRESH_OF


def op_calls(h, w, ids, grads=False):
    labels = ids[:, 0].contiguous()
    ids8 = ids[:, :8].contiguous()
    rows_t = torch.linspace(0.5, 1.5, h.shape[0], device=h.device)
    out = {
        "logprob": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7),
        "logprob_rowT": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=rows_t),
        "topk1": lambda: ops.linear_topk_logprobs(h, w, 1, temperature=0.7),
        "topk8": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7),
        "topk32": lambda: ops.linear_topk_logprobs(h, w, 32, temperature=0.7),
        "topk8_labels": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7,
                                                         labels=labels, return_entropy=True),
        "at8": lambda: ops.linear_logprobs_at(h, w, ids8, temperature=0.7),
    }
    if grads:
        def fb(fn):
            def run():
                hh = h.detach().requires_grad_(True)
                ww = w.detach().requires_grad_(True)
                outs = fn(hh, ww)
                loss = sum(o.float().sum() for o in outs if o is not None and o.is_floating_point())
                loss.backward()
                return tuple(outs) + (hh.grad, ww.grad)
            return run
        out["logprob_fb"] = fb(lambda hh, ww: ops.linear_logprob_entropy(hh, ww, labels,
                                                                          temperature=0.7))
        out["at8_fb"] = fb(lambda hh, ww: ops.linear_logprobs_at(hh, ww, ids8, temperature=0.7))
    return out


def as_tuple(out):
    return tuple(t for t in (out if isinstance(out, tuple) else (out,)) if t is not None)


def bits():
    rows = []
    for n in BITS_N:
        for hdtype in (torch.bfloat16, torch.float32):
            h0, w0, ids = distill_inputs(n, H, V, 32, 1)
            h0 = h0.to(hdtype)
            outs = {}
            for direct in (False, True, True):
                set_direct(direct)
                h, w = h0.clone(), w0.clone()  # new addresses
                for name, fn in op_calls(h, w, ids, grads=True).items():
                    outs.setdefault(name, []).append(as_tuple(fn()))
                del h, w
            for name, got in outs.items():
                same = all(len(g) == len(got[0]) and all(torch.equal(a, b) for a, b in
                                                         zip(g, got[0])) for g in got[1:])
                rows.append({"N": n, "hidden": str(hdtype), "op": name, "same_bits": same})
                print(f"bits N={n} {hdtype} {name}: {'same' if same else 'DIFFER'}", flush=True)
    set_direct(True)
    return rows


_inside = [0.0]
_first = [None]


def wrap_launches():
    modules = [m for name, m in sys.modules.items()
               if name.startswith("megatron_overlay.ops.kernels.") and hasattr(m, "launch")
               and m is not launch_mod]
    real = launch_mod.launch

    def timed_launch(*a, **k):
        t0 = time.perf_counter()
        if _first[0] is None:
            _first[0] = t0
        real(*a, **k)
        _inside[0] += time.perf_counter() - t0
    for m in modules:
        m.launch = timed_launch
    return lambda: [setattr(m, "launch", real) for m in modules]


def sync_ms(fn):
    """The median of BURST single synchronized calls, ms."""
    torch.cuda.synchronize()
    times = []
    for _ in range(BURST):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def host_ab(fn, gemm):
    res = {mode: {"host": [], "launch": [], "first": [], "sync": []} for mode in (False, True)}
    gemm_sync = []
    for r in range(ROUNDS):
        for direct in ((False, True) if r % 2 == 0 else (True, False)):
            set_direct(direct)
            torch.cuda.synchronize()
            fn()
            _inside[0] = 0.0
            first = 0.0
            t0 = time.perf_counter()
            for _ in range(BURST - 1):
                _first[0] = None
                t1 = time.perf_counter()
                fn()
                first += _first[0] - t1
            res[direct]["host"].append((time.perf_counter() - t0) * 1e6 / (BURST - 1))
            res[direct]["launch"].append(_inside[0] * 1e6 / (BURST - 1))
            res[direct]["first"].append(first * 1e6 / (BURST - 1))
            res[direct]["sync"].append(sync_ms(fn))
        gemm_sync.append(sync_ms(gemm))
    g = statistics.median(gemm_sync)
    out = {"gemm_sync_ms": g}
    for direct, d in res.items():
        out["on" if direct else "off"] = {
            "host_us": statistics.median(d["host"]), "launch_us": statistics.median(d["launch"]),
            "first_launch_us": statistics.median(d["first"]),
            "sync_x": statistics.median(d["sync"]) / g}
    set_direct(True)
    return out


def host():
    rows = []
    unwrap = wrap_launches()
    try:
        for n in (256, 8192):
            h, w, ids = distill_inputs(n, H, V, 32, 0)
            gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
            for name, fn in op_calls(h, w, ids, grads=True).items():
                if n == 8192 and name not in ("logprob", "topk8", "at8"):
                    continue
                if name.endswith("_fb"):
                    call = fn
                else:
                    def call(fn=fn):
                        with torch.no_grad():
                            return fn()
                call()
                row = {"N": n, "op": name, **host_ab(call, gemm)}
                rows.append(row)
                off, on = row["off"], row["on"]
                print(f"host N={n} {name}: host {off['host_us']:.0f} -> {on['host_us']:.0f} us, "
                      f"in launch {off['launch_us']:.0f} -> {on['launch_us']:.0f} us, to the "
                      f"first launch {off['first_launch_us']:.0f} -> {on['first_launch_us']:.0f} "
                      f"us, sync "
                      f"{off['sync_x']:.3f} -> {on['sync_x']:.3f} x GEMM "
                      f"({row['gemm_sync_ms']:.3f} ms)", flush=True)
    finally:
        unwrap()
    return rows


def profile():
    out = {}
    h, w, ids = distill_inputs(256, H, V, 32, 0)
    calls = op_calls(h, w, ids, grads=True)
    for name in ("logprob", "topk8", "logprob_fb"):
        fn = calls[name]
        with torch.set_grad_enabled(name.endswith("_fb")):
            for _ in range(3):
                fn()
            prof = cProfile.Profile()
            torch.cuda.synchronize()
            prof.enable()
            for _ in range(20):
                fn()
            prof.disable()
            torch.cuda.synchronize()
        stats = pstats.Stats(prof).stats
        rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:40]
        lines = [f"{tt / 20 * 1e6:8.2f} {ct / 20 * 1e6:8.2f} {nc / 20:5.1f} "
                 f"{os.path.basename(f)}:{line}({func})"
                 for (f, line, func), (_, nc, tt, ct, _) in rows]
        out[name] = lines
        print(f"== cProfile {name} (20 calls; own us, incl us, calls a call)\n" +
              "\n".join(lines), flush=True)
    return out


def main(path):
    print("triton launcher known:", launch_mod._TRITON_LAUNCHER_KNOWN, flush=True)
    result = {"device": torch.cuda.get_device_name(), "bits": bits()}
    plans = [e[3] for e in launch_mod._compiled.values()]
    result["plans"] = {"direct": sum(p is not None for p in plans), "total": len(plans),
                       "descriptor_maps": len(launch_mod._descriptor_maps)}
    print("plans:", result["plans"], flush=True)
    result["host"] = host()
    result["profile"] = profile()
    json.dump(result, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
