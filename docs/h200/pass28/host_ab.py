"""Pass 28: this pass's host-side changes against the tree before them, in one process.

"base" is the package of 0026e3f (pass 27's tree) imported as ``megatron_overlay_base``
(``git archive 0026e3f megatron_overlay``, the folder renamed, on PYTHONPATH; the
package's imports are relative); "new" is this tree. The changes: a loss's expanded
(stride 0) row gradients read in place by the backward's kernels (no contiguous copy),
the settings' environment reads, the current device's read.

1. bits: each op's outputs and gradients (loss: the sum of the outputs, whose gradients
   come expanded), base and new, on the same inputs, N = 256 and 1029, bf16: equal bit
   for bit or not.
2. time: each op at N tokens (default 256; H = 4096, V = 151936, bf16, T = 0.7): a
   synchronized call (median of 8 single calls), its host time to the call's return and
   to its first Triton launch, and a call's host time in a burst (the first 8 calls after
   a sync); ROUNDS rounds, base and new alternated in each, and the GEMM's synchronized
   call each round; medians, us, and the synchronized call x the GEMM's.
3. the primitives the changes replace: ``os.environ.get`` against ``env_value`` of an
   unset and a set variable, ``torch.cuda.current_device()`` against
   ``torch._C._cuda_getDevice()``; us a call (timeit, median of 5 x 20000).

    PYTHONPATH=.:BASE python docs/h200/pass28/host_ab.py OUT.json      (one GPU)

($AB_ROUNDS, default 9; $AB_N, default 256.)
"""
import json
import os
import statistics
import sys
import time
import timeit

import torch

from megatron_overlay import ops as new_ops
from megatron_overlay.ops.kernels import triton_impl, triton_topk  # noqa: F401
from megatron_overlay.ops.env_flags import env_value
from tools.bench.inputs import distill_inputs

H, V, T = 4096, 151936, 0.7
ROUNDS = int(os.environ.get("AB_ROUNDS", 9))
TOKENS = [int(n) for n in os.environ.get("AB_N", "256").split(",")]
BURST = 8


def op_calls(ops, h, w, ids):
    """name -> a zero-argument call: forward ones under no_grad, fwd+bwd ones (``_fb``)
    return the outputs and both gradients of the sum of the outputs."""
    labels = ids[:, 0].contiguous()
    ids8 = ids[:, :8].contiguous()

    def fwd(fn):
        def run():
            with torch.no_grad():
                return fn(h, w)
        return run

    def fb(fn):
        def run():
            hh, ww = h.detach().requires_grad_(True), w.detach().requires_grad_(True)
            outs = [o for o in fn(hh, ww) if o is not None]
            sum(o.sum() for o in outs if o.is_floating_point()).backward()
            return (*outs, hh.grad, ww.grad)
        return run

    logprob = lambda hh, ww: ops.linear_logprob_entropy(hh, ww, labels, temperature=T)  # noqa
    at8 = lambda hh, ww: ops.linear_logprobs_at(hh, ww, ids8, temperature=T)  # noqa: E731
    topk = lambda k: lambda hh, ww: ops.linear_topk_logprobs(hh, ww, k, temperature=T)  # noqa
    return {"logprob": fwd(logprob), "topk1": fwd(topk(1)), "topk8": fwd(topk(8)),
            "topk32": fwd(topk(32)), "at8": fwd(at8), "logprob_fb": fb(logprob),
            "at8_fb": fb(at8), "topk8_fb": fb(topk(8))}


def as_tensors(out):
    return [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if t is not None]


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():  # NaN included
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.view(ints), b.view(ints))
    return torch.equal(a, b)


base_ops = None  # megatron_overlay_base.ops, imported by main()


def bits():
    rows = []
    for n in (256, 1029):
        h, w, ids = distill_inputs(n, H, V, 32, 1)
        base, new = op_calls(base_ops, h, w, ids), op_calls(new_ops, h, w, ids)
        for name in new:
            got = [as_tensors(fn()) for fn in (base[name], new[name])]
            same = len(got[0]) == len(got[1]) and all(same_bits(a, b) for a, b in zip(*got))
            rows.append({"N": n, "op": name, "same_bits": same})
            print(f"bits N={n} {name}: {'same' if same else 'DIFFER'}", flush=True)
    return rows


_first = [None]


def wrap_launches():
    """Every kernels module's ``launch`` of both packages (of those imported), noting the
    first of a call in ``_first``."""
    for prefix in ("megatron_overlay.ops.kernels.", "megatron_overlay_base.ops.kernels."):
        if prefix + "launch" not in sys.modules:
            continue
        real = sys.modules[prefix + "launch"].launch

        def first_launch(*a, real=real, **k):
            if _first[0] is None:
                _first[0] = time.perf_counter()
            real(*a, **k)
        for name, m in list(sys.modules.items()):
            if name.startswith(prefix) and name != prefix + "launch" and hasattr(m, "launch"):
                m.launch = first_launch


def single(fn):
    """(sync, host return, first launch) of one synchronized call, us."""
    torch.cuda.synchronize()
    _first[0] = None
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t2 - t0) * 1e6, (t1 - t0) * 1e6, ((_first[0] or t0) - t0) * 1e6


def burst_host(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(BURST):
        fn()
    return (time.perf_counter() - t0) * 1e6 / BURST


def timing(n):
    h, w, ids = distill_inputs(n, H, V, 32, 0)
    gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
    calls = {"base": op_calls(base_ops, h, w, ids), "new": op_calls(new_ops, h, w, ids)}
    rows = []
    for name in calls["new"]:
        for side in calls.values():
            for _ in range(3):
                side[name]()
        res = {side: {"sync": [], "host": [], "first": [], "burst": []} for side in calls}
        gemm_sync = []
        for r in range(ROUNDS):
            for side in (("base", "new") if r % 2 == 0 else ("new", "base")):
                fn = calls[side][name]
                singles = [single(fn) for _ in range(8)]
                for key, i in (("sync", 0), ("host", 1), ("first", 2)):
                    res[side][key].append(statistics.median(s[i] for s in singles))
                res[side]["burst"].append(burst_host(fn))
            gemm_sync.append(statistics.median(single(gemm)[0] for _ in range(8)))
        g = statistics.median(gemm_sync)
        row = {"N": n, "op": name, "gemm_sync_us": g}
        for side, d in res.items():
            row[side] = {key: statistics.median(v) for key, v in d.items()}
            row[side]["sync_x"] = row[side]["sync"] / g
        rows.append(row)
        b, nw = row["base"], row["new"]
        print(f"time N={n} {name}: sync {b['sync']:.1f} -> {nw['sync']:.1f} us "
              f"({b['sync_x']:.3f} -> {nw['sync_x']:.3f} x the GEMM's {g:.1f}), host return "
              f"{b['host']:.1f} -> {nw['host']:.1f}, first launch {b['first']:.1f} -> "
              f"{nw['first']:.1f}, burst host {b['burst']:.1f} -> {nw['burst']:.1f}",
              flush=True)
    return rows


def primitives():
    os.environ.pop("AB_SET_VARIABLE", None)
    cases = {
        "os.environ.get (unset)": lambda: os.environ.get("AB_UNSET_VARIABLE", ""),
        "env_value (unset)": lambda: env_value("AB_UNSET_VARIABLE"),
        "os.environ.get (set)": lambda: os.environ.get("PATH", ""),
        "env_value (set)": lambda: env_value("PATH"),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
    }
    out = {}
    for name, fn in cases.items():
        out[name] = statistics.median(timeit.timeit(fn, number=20000) / 20000 * 1e6
                                      for _ in range(5))
        print(f"primitive {name}: {out[name]:.3f} us", flush=True)
    return out


def main():
    global base_ops
    import megatron_overlay_base.ops as base_ops  # (fb_profile.py imports op_calls alone)
    import megatron_overlay_base.ops.kernels.triton_impl  # noqa: F401  (wrapped below)
    import megatron_overlay_base.ops.kernels.triton_topk  # noqa: F401
    out_path = sys.argv[1]
    wrap_launches()
    result = {"bits": bits(), "primitives": primitives(), "time": []}
    json.dump(result, open(out_path, "w"), indent=1)
    for n in TOKENS:
        result["time"] += timing(n)
        json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
