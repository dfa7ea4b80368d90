"""Each candidate kernel config of ours at one shape: forward stats and backward, timed
(median of CUDA-event-timed calls) and checked against the default config."""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import torch

from .inputs import (ACC_ROWS, TEMPERATURE, fp32_copy, fp64_reference, loss_coeffs,
                     make_inputs, max_err)
from .timing import interleaved


def cuda_time(fn, inputs, warmup: int, repeats: int) -> float:
    """Median ms of single synchronized calls (configs are compared within one shape and run)."""
    return interleaved({"fn": fn}, inputs, repeats, single=True, heat_s=0,
                       warmup_calls=warmup)["fn"].median_ms


OPERANDS = ("bf16", "fp32_hidden", "fp32_weight")


def sweep(shape, log, operands="bf16"):
    """Each candidate kernel config at one shape: forward stats and backward, timed and
    checked. ``operands``: bf16, or one of them fp32 (inputs.fp32_copy; the mixed
    candidates, autotune_configs.MIXED_CANDIDATES); the GEMM floors stay bf16's."""
    from megatron_overlay.ops.kernels import autotune_configs as ac
    from megatron_overlay.ops.kernels import triton_impl as ti
    n, hdim, v = shape
    sets, w = make_inputs(n, hdim, v, seed=5)
    inv_t = 1.0 / TEMPERATURE
    gemm_ms = cuda_time(lambda h, w_: torch.matmul(h, w_.T), [(h, w) for h, _ in sets], 2, 5)
    grad = torch.randn(n, v, device=w.device, dtype=w.dtype)
    # G @ W and G.T @ h have equal FLOPs: twice the median of the two, alternated
    bwd_gemms_ms = cuda_time(torch.matmul, [(grad, w), (grad.T, sets[0][0])], 1, 6) * 2
    grad = None
    if operands == "fp32_hidden":
        sets = [(fp32_copy(h, i), y) for i, (h, y) in enumerate(sets)]
    elif operands == "fp32_weight":
        w = fp32_copy(w, 0)
    lsets = [(h, torch.where(y % 7 == 0, -1, y)) for h, y in sets]
    ref_lp, ref_ent = fp64_reference(sets[0][0], w, sets[0][1], ACC_ROWS)
    log(f"sweep N={n} H={hdim} V={v} {operands}: gemm {gemm_ms:.2f} ms")
    results = {"shape": [n, hdim, v], "operands": operands, "gemm_ms": gemm_ms,
               "forward": [], "backward": []}
    mixed = operands != "bf16"
    for cfg in ac.MIXED_CANDIDATES if mixed else ac.FORWARD_CANDIDATES:
        rec = {"config": cfg.name(), **asdict(cfg)}
        try:
            t0 = time.time()
            stats = ti.forward_stats(sets[0][0], w, sets[0][1], inv_t, True, config=cfg)
            rec["compile_s"] = time.time() - t0
            lse, _, entropy, lp = ti.finalize(stats[None], sets[0][1], v, -100, True)[:4]
            rec["lp_err"] = max_err(lp, ref_lp)
            rec["ent_err"] = max_err(entropy, ref_ent)
            rec["ms"] = cuda_time(lambda h, y: ti.forward_stats(h, w, y, inv_t, True, config=cfg),
                                  lsets, 1, 5)
            rec["x_gemm"] = rec["ms"] / gemm_ms
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        log(f"  fwd {json.dumps(rec)}")
        results["forward"].append(rec)
    # backward: the default config's result is the check for the others
    h, y = sets[0]
    lse, mean_z = ti.finalize(ti.forward_stats(h, w, y, inv_t, True)[None], None, v, -100,
                              True)[:2]
    g_lp, g_ent = loss_coeffs(n, w.device)
    base_dh, base_dw = ti.backward(h, w, y, inv_t, lse, mean_z, g_lp, g_ent)
    results["bwd_gemms_ms"] = bwd_gemms_ms
    log(f"  two backward GEMMs (cuBLAS, bf16 out): {results['bwd_gemms_ms']:.2f} ms")
    for cfg in ac.MIXED_CANDIDATES if mixed else ac.BACKWARD_CANDIDATES:
        rec = {"config": cfg.name(), **asdict(cfg)}
        try:
            dh, dw = ti.backward(h, w, y, inv_t, lse, mean_z, g_lp, g_ent, config=cfg)
            rec["dh_rel_diff"] = ((dh - base_dh).norm() / base_dh.norm()).item()
            rec["dw_rel_diff"] = ((dw - base_dw).norm() / base_dw.norm()).item()
            del dh, dw
            rec["ms"] = cuda_time(lambda: ti.backward(h, w, y, inv_t, lse, mean_z, g_lp, g_ent,
                                                      config=cfg), [()], 1, 3)
            # x_gemm: over one forward GEMM (as the forward's, the key stored runs have);
            # x_floor: over the backward's own floor, its two GEMMs
            rec["x_gemm"] = rec["ms"] / gemm_ms
            rec["x_floor"] = rec["ms"] / bwd_gemms_ms
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        log(f"  bwd {json.dumps(rec)}")
        results["backward"].append(rec)
    return results


