"""Pass 8 probe: the log-prob forward+backward against the 3-GEMM floor, per backward
variant (kernel epilogue, token blocks and vocab chunks), bursts in rounds; then one
profiled step of the default per shape (CUDA time by kernel).

    python docs/h200/pass8/bwd_probe.py OUT_JSON [N,H,V ...]
"""
import json
import sys
from dataclasses import replace

import torch

from megatron_overlay.ops import linear_logprob_entropy
from megatron_overlay.ops.kernels import autotune_configs as ac
from megatron_overlay.ops.kernels import gemm_fp32
from tools.bench.inputs import make_inputs

T = 0.7
BASE = ac.BACKWARD_16BIT
DEFAULTS = dict(ac._DEFAULTS["backward"][1].__dict__)
VARIANTS = {
    "default": {},
    "subtile": {"cfg": replace(BASE, epilogue_subtile=True)},
    "subtile_flat": {"cfg": replace(BASE, epilogue_subtile=True, loop=1)},
    "subtile_flat_s4": {"cfg": replace(BASE, epilogue_subtile=True, loop=1, num_stages=4)},
    "block16k": {"block": 16384},
    "budget480": {"budget": 480 << 20},
    "unchunked": {"block": 1 << 20, "budget": 1 << 40},
}


def apply(var):
    fp32, _, portable, mixed = ac._DEFAULTS["backward"]
    ac._DEFAULTS["backward"] = (fp32, var.get("cfg", BASE), portable, mixed)
    ac.BACKWARD_BLOCK_TOKENS = var.get("block", 8192)
    ac.BACKWARD_EXTRA_BUDGET_BYTES = var.get("budget", 416 << 20)


def main():
    out_path = sys.argv[1]
    shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [
        (8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)]
    print("addmm out_dtype fp32:", gemm_fp32.out_dtype_supported(
        "addmm", torch.bfloat16, torch.device("cuda")), flush=True)
    results = []
    for n, hdim, v in shapes:
        sets, w = make_inputs(n, hdim, v, seed=3)
        h, y = sets[0]

        def gemm_fb():
            logits = h @ w.T
            return logits @ w, logits.T @ h

        def ours():
            hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
            lp, ent = linear_logprob_entropy(hh, ww, y, temperature=T)
            (lp.sum() + ent.sum()).backward()
            return hh.grad, ww.grad

        rec = {"shape": [n, hdim, v], "variants": {}}
        ref = None
        ok = {}
        for name, var in VARIANTS.items():
            apply(var)
            try:
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                g = ours()
                torch.cuda.synchronize()
                peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
                if ref is None:
                    ref = g
                same = all(torch.equal(a, b) for a, b in zip(g, ref))
                rel = max(((a.float() - b.float()).norm() / b.float().norm()).item()
                          for a, b in zip(g, ref))
                del g
                ok[name] = var
                rec["variants"][name] = {"bitwise_as_default": same, "rel_diff": rel,
                                         "peak_mib_incl_grads": peak, "ms": []}
            except Exception as e:  # e.g. shared memory
                rec["variants"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(n, name, rec["variants"][name], flush=True)
        apply({})
        rec["gemm_fb_ms"] = []
        calls = 3
        for rnd in range(3):
            for name in ["gemm"] + list(ok):
                if name == "gemm":
                    fn = gemm_fb
                else:
                    apply(ok[name])
                    fn = ours
                fn()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    fn()
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end) / calls
                (rec["gemm_fb_ms"] if name == "gemm" else rec["variants"][name]["ms"]).append(ms)
        apply({})
        gm = sorted(rec["gemm_fb_ms"])[1]
        for name in ok:
            r = rec["variants"][name]
            r["x_floor"] = sorted(r["ms"])[1] / gm
            print(f"{n} {name}: {sorted(r['ms'])[1]:.2f} ms = {r['x_floor']:.4f}x floor "
                  f"(gemm fb {gm:.2f})", flush=True)
        # one profiled step of the default and of the best subtile variant
        from torch.profiler import ProfilerActivity, profile
        for name in ("default", "subtile_flat"):
            if name not in ok:
                continue
            apply(ok[name])
            ours()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                ours()
                torch.cuda.synchronize()
            totals = {}
            for evt in prof.key_averages():
                t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
                if t:
                    totals[evt.key[:90]] = (totals.get(evt.key[:90], (0, 0))[0] + t / 1000.0,
                                            totals.get(evt.key[:90], (0, 0))[1] + evt.count)
            rec.setdefault("profile", {})[name] = dict(sorted(totals.items(),
                                                              key=lambda kv: -kv[1][0]))
            print(n, name, "profile:", json.dumps(rec["profile"][name])[:1500], flush=True)
        apply({})
        results.append(rec)
        del sets, w, h, y, ref
        torch.cuda.empty_cache()
        json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
