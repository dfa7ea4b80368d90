"""sm_90a PTX (Triton 3.6.0 on the CPU machine) of the kernels a refactor touches, hashed per
kernel and mode: the same hashes before and after = the same machine code."""
import hashlib, sys, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from megatron_overlay.ops.kernels import (check_ids as ci, finalize_stats as fs, logprob_forward as lf,
                                          logprob_backward as lb, topk_forward as tf, topk_rescan as tr)

def ptx(kern, types, consts, warps, stages):
    sig, cx = {}, {}
    for i, a in enumerate(kern.arg_names):
        if a in consts:
            sig[a] = "constexpr"; cx[(i,)] = consts[a]
        else:
            sig[a] = types.get(a, "i32")
    c = triton.compile(ASTSource(kern, sig, constexprs=cx), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=stages))
    text = c.asm["ptx"].split(".section\t.debug")[0]  # debug sections: source positions
    code = [ln for ln in text.splitlines()
            if not ln.strip().startswith((".loc", ".file", "//", "$L__", "$L__tmp"))]
    return hashlib.sha256("\n".join(code).encode()).hexdigest()[:16]

out = {}
what = sys.argv[1:] or ["record", "mma"]
for has_labels in ((False, True) if "record" in what else ()):
    for ent in (False, True):
        out[f"finalize l{int(has_labels)} e{int(ent)}"] = ptx(
            fs.finalize_kernel, {n: "*fp32" for n in ("stats_ptr", "lse_ptr", "mean_z_ptr", "ent_ptr", "lp_ptr")}
            | {"labels_ptr": "*i64", "valid_ptr": "*i8", "bad_ptr": "*i8", "rec_ptr": "*i64"},
            dict(HAS_LABELS=has_labels, WITH_ENTROPY=ent, BLOCK=fs.FINALIZE_BLOCK), 4, 1)
for idt in (("*i64", "*i32") if "record" in what else ()):
    out[f"check_ids {idt}"] = ptx(ci.check_ids_kernel, {"ids_ptr": idt, "local_ptr": "*i64",
                                  "bad_rows_ptr": "*i8", "rec_ptr": "*i64"},
                                  dict(BLOCK_ROWS=ci.CHECK_BLOCK_ROWS, BLOCK_IDS=8), 4, 1)
MODES = {0: ("bf16", "bf16", "tf32"), 1: ("bf16", "bf16", "tf32"), 2: ("bf16", "bf16", "tf32"),
         3: ("fp32", "fp32", "tf32x3")}
for mode, (hdt, wdt, dot) in (MODES.items() if "mma" in what else ()):
    lo = mode if mode < 3 else 0
    cfg = tf.TOPK_16BIT if mode == 0 else tf.TOPK_FP32 if mode == 3 else tf.TOPK_MIXED
    wd = f"tensordesc<{wdt}[{cfg.block_v}, {cfg.block_k}]>"
    hd = f"tensordesc<{hdt}[{cfg.block_m}, {cfg.block_k}]>"
    common = dict(BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k, USE_TMA=True,
                  DOT_PRECISION=dot, UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=lo)
    out[f"rescan m{mode}"] = ptx(tr.rescan_kernel, dict(h_ptr=f"*{hdt}", h_lo_ptr=f"*{hdt}", w_src=wd,
        w_lo_src=wd, tiles_ptr="*i32", pairs_ptr="*i32", tile_v_ptr="*fp32", inv_t_ptr="*fp32",
        out_v_ptr="*fp32", out_i_ptr="*i32", inv_t="fp32"),
        dict(BLOCK_R=tr.RESCAN_ROWS, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k, KP=32, USE_TMA=True,
             DOT_PRECISION=dot, UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=lo,
             OPAQUE_COLUMNS=True), tr.RESCAN_WARPS, min(tr.RESCAN_STAGES, cfg.num_stages))
    types = dict(h_src=hd, h_lo_src=hd, w_src=wd, w_lo_src=wd, inv_t="fp32")
    for name, kern in (("topk", tf.topk_stats_kernel), ("forward", lf.forward_stats_kernel)):
        consts = {a: v for a, v in (common | dict(KP=8, WITH_ENTROPY=True, HAS_LABELS=True, LOOP=cfg.loop,
                  WARP_SPEC=cfg.warp_specialize)).items() if a in kern.arg_names}
        ptrs = {a: "*fp32" for a in kern.arg_names if a.endswith("_ptr") or a in ("part", "stats")}
        ptrs.update({a: "*i64" for a in kern.arg_names if "label" in a})
        ptrs.update({a: "*i32" for a in kern.arg_names if a in ("part_i_ptr", "list_i_ptr")})
        out[f"{name} m{mode}"] = ptx(kern, ptrs | types, consts, cfg.num_warps, cfg.num_stages)
for k, v in out.items():
    print(f"{k}: {v}")
