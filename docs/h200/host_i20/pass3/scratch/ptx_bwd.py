"""sm_90a PTX hashes (Triton 3.6.0, CPU machine) of the backward's grad_logits_kernel in each mode."""
import hashlib, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from megatron_overlay.ops.kernels import logprob_backward as lb, autotune_configs as ac
kern = lb.grad_logits_kernel
for mode, (hdt, wdt, dot, cfg) in {0: ("bf16", "bf16", "tf32", ac.BACKWARD_16BIT), 1: ("bf16", "bf16", "tf32", ac.BACKWARD_16BIT),
        2: ("bf16", "bf16", "tf32", ac.BACKWARD_16BIT), 3: ("fp32", "fp32", "tf32x3", ac.BACKWARD_FP32)}.items():
    lo = mode if mode < 3 else 0
    hd = f"tensordesc<{hdt}[{cfg.block_m}, {cfg.block_k}]>"
    wd = f"tensordesc<{wdt}[{cfg.block_v}, {cfg.block_k}]>"
    gd = f"tensordesc<{hdt}[{cfg.block_m}, {cfg.block_v}]>"
    types = dict(h_src=hd, h_lo_src=hd, w_src=wd, w_lo_src=wd, g_dst=gd, labels_ptr="*i64", inv_t="fp32")
    consts = dict(BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k, HAS_ENTROPY=True, HAS_SCALE=False,
                  USE_TMA=True, FLATTEN=False, WARP_SPEC=False, DOT_PRECISION=dot, UPCAST_DOT=False,
                  ROW_INV_T=False, LOGITS_DTYPE=None, LO=lo, HAS_LABELS=True)
    sig, cx = {}, {}
    for i, a in enumerate(kern.arg_names):
        if a in consts: sig[a] = "constexpr"; cx[(i,)] = consts[a]
        else: sig[a] = types.get(a, "*fp32" if a.endswith("_ptr") else "i32")
    c = triton.compile(ASTSource(kern, sig, constexprs=cx), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    text = c.asm["ptx"].split(".section\t.debug")[0]
    code = [ln for ln in text.splitlines() if not ln.strip().startswith((".loc", ".file", "//", "$L__"))]
    print(f"grad_logits m{mode}: {hashlib.sha256(chr(10).join(code).encode()).hexdigest()[:16]}", flush=True)
