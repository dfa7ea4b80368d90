"""Pass 8 probe 2: the backward's recompute kernel (grad_logits_kernel) per config, its CUDA
time by torch.profiler in rounds beside the forward kernel's (same MMA work), then the
log-prob forward+backward of the default and the two fastest configs against the 3-GEMM
floor, bursts in rounds whose order rotates (a call's speed depends on its predecessor
on this GPU: BENCHMARKS pass 7).

    python docs/h200/pass8/bwd_probe2.py OUT_JSON

Ran (r2) on a tree whose KernelConfig also had ``preload`` and ``tma_store`` (the
forms dropped after it; r2/machine.txt names that tree's files): a record, not runnable now.
"""
import json
import sys
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from megatron_overlay.ops import linear_logprob_entropy
from megatron_overlay.ops.kernels import autotune_configs as ac
from megatron_overlay.ops.kernels import triton_impl as ti
from tools.bench.inputs import loss_coeffs, make_inputs

T = 0.7
BASE = ac.BACKWARD_16BIT
CONFIGS = {
    "default": BASE,
    "pre": replace(BASE, preload=True),
    "ptrst": replace(BASE, tma_store=False),
    "pre_ptrst": replace(BASE, preload=True, tma_store=False),
    "pre_sub": replace(BASE, preload=True, epilogue_subtile=True),
    "pre_sub_ptrst": replace(BASE, preload=True, epilogue_subtile=True, tma_store=False),
    "flat_sub": replace(BASE, loop=1, epilogue_subtile=True),
    "flat_sub_ptrst": replace(BASE, loop=1, epilogue_subtile=True, tma_store=False),
}


def kernel_ms(fn, name, calls=2):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum((getattr(e, "device_time_total", 0) or 0) for e in prof.key_averages()
               if e.key.startswith(name)) / 1000.0 / calls


def set_default(cfg):
    fp32, _, portable, mixed = ac._DEFAULTS["backward"]
    ac._DEFAULTS["backward"] = (fp32, cfg, portable, mixed)


def main():
    out_path = sys.argv[1]
    results = []
    for n, hdim, v in ((8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)):
        sets, w = make_inputs(n, hdim, v, seed=3)
        h, y = sets[0]
        stats = ti.forward_stats(h, w, y, 1 / T, True)
        lse, mean_z = ti.finalize(stats[None], None, v, -100, True)[:2]
        g_lp, g_ent = loss_coeffs(n, w.device)
        rec = {"shape": [n, hdim, v], "grad_kernel_ms": {c: [] for c in CONFIGS},
               "forward_kernel_ms": [], "errors": {}}
        ref = ti.backward(h, w, y, 1 / T, lse, mean_z, g_lp, g_ent, config=BASE,
                          d_weight_dtype=w.dtype, d_hidden_dtype=h.dtype)
        ok = {}
        for name, cfg in CONFIGS.items():
            try:
                got = ti.backward(h, w, y, 1 / T, lse, mean_z, g_lp, g_ent, config=cfg,
                                  d_weight_dtype=w.dtype, d_hidden_dtype=h.dtype)
                rec.setdefault("bitwise", {})[name] = all(torch.equal(a, b) for a, b in zip(got, ref))
                del got
                ok[name] = cfg
            except Exception as e:
                rec["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
        print(n, "bitwise", rec.get("bitwise"), rec["errors"], flush=True)
        del ref
        for _ in range(2):
            rec["forward_kernel_ms"].append(kernel_ms(
                lambda: ti.forward_stats(h, w, y, 1 / T, True), "forward_stats_kernel"))
            for name, cfg in ok.items():
                rec["grad_kernel_ms"][name].append(kernel_ms(
                    lambda: ti.backward(h, w, y, 1 / T, lse, mean_z, g_lp, g_ent, config=cfg,
                                        d_weight_dtype=w.dtype, d_hidden_dtype=h.dtype),
                    "grad_logits_kernel"))
        fwd = min(rec["forward_kernel_ms"])
        ranked = sorted(ok, key=lambda c: min(rec["grad_kernel_ms"][c]))
        for c in ranked:
            print(f"{n} {c}: grad kernel {min(rec['grad_kernel_ms'][c]):.2f} ms "
                  f"= {min(rec['grad_kernel_ms'][c]) / fwd:.4f}x the forward kernel "
                  f"({fwd:.2f})", flush=True)
        picks = ["default"] + [c for c in ranked if c != "default"][:2]

        def gemm_fb():
            logits = h @ w.T
            return logits @ w, logits.T @ h

        def ours():
            hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
            lp, ent = linear_logprob_entropy(hh, ww, y, temperature=T)
            (lp.sum() + ent.sum()).backward()
            return hh.grad, ww.grad

        methods = ["gemm"] + picks
        rec["fb_ms"] = {m: [] for m in methods}
        for rnd in range(4):
            order = methods[rnd % len(methods):] + methods[:rnd % len(methods)]
            for m in order:
                if m == "gemm":
                    fn = gemm_fb
                else:
                    set_default(ok[m])
                    fn = ours
                fn()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(3):
                    fn()
                e.record()
                torch.cuda.synchronize()
                rec["fb_ms"][m].append(s.elapsed_time(e) / 3)
        set_default(BASE)
        med = {m: sorted(x)[len(x) // 2] for m, x in rec["fb_ms"].items()}
        rec["fb_x_floor"] = {m: med[m] / med["gemm"] for m in picks}
        print(n, "fb x floor (median of 4 rounds):", json.dumps(rec["fb_x_floor"]),
              "gemm fb", round(med["gemm"], 2), flush=True)
        results.append(rec)
        json.dump(results, open(out_path, "w"), indent=1)
        del sets, w, h, y, stats
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
