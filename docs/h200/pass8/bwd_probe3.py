"""Pass 8 probe 3: the recompute kernel's tile order (group_m: token tiles walked before
moving along vocab) at the new default, by CUDA time in rounds beside the forward kernel.

    python docs/h200/pass8/bwd_probe3.py OUT_JSON
"""
import json
import sys
from dataclasses import replace

import torch

from megatron_overlay.ops.kernels import autotune_configs as ac
from megatron_overlay.ops.kernels import triton_impl as ti
from tools.bench.inputs import loss_coeffs, make_inputs

T = 0.7


def kernel_ms(fn, name, calls=2):
    """CUDA ms a call of the kernels named ``name``* in ``calls`` calls (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum((getattr(e, "device_time_total", 0) or 0) for e in prof.key_averages()
               if e.key.startswith(name)) / 1000.0 / calls

CONFIGS = {f"g{g}": replace(ac.BACKWARD_16BIT, group_m=g) for g in (16, 4, 8, 32)}


def main():
    results = []
    for n, hdim, v in ((8192, 4096, 151936), (16384, 3584, 152064)):
        sets, w = make_inputs(n, hdim, v, seed=3)
        h, y = sets[0]
        stats = ti.forward_stats(h, w, y, 1 / T, True)
        lse, mean_z = ti.finalize(stats[None], None, v, -100, True)[:2]
        g_lp, g_ent = loss_coeffs(n, w.device)
        rec = {"shape": [n, hdim, v], "fwd": [], "grad": {c: [] for c in CONFIGS}}
        for _ in range(3):
            rec["fwd"].append(kernel_ms(lambda: ti.forward_stats(h, w, y, 1 / T, True),
                                        "forward_stats_kernel"))
            for c, cfg in CONFIGS.items():
                rec["grad"][c].append(kernel_ms(
                    lambda: ti.backward(h, w, y, 1 / T, lse, mean_z, g_lp, g_ent, config=cfg,
                                        d_weight_dtype=w.dtype, d_hidden_dtype=h.dtype),
                    "grad_logits_kernel"))
        fwd = min(rec["fwd"])
        for c, x in rec["grad"].items():
            print(n, c, [round(a, 2) for a in x], f"best {min(x) / fwd:.4f}x forward ({fwd:.2f})",
                  flush=True)
        results.append(rec)
        json.dump(results, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
