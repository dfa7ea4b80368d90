"""sm_90a compile (Triton 3.7.1, CPU) of rescan_kernel in each precision mode at the kept
config: shared memory against the H200's 232448 bytes, registers."""
import subprocess, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from megatron_overlay.ops.kernels import topk_forward as tf, topk_rescan as tr
import os; P = os.path.dirname(triton.__file__) + "/backends/nvidia/bin"
for name, cfg, lo, hdt, wdt, dot in [("bf16", tf.TOPK_16BIT, 0, "bf16", "bf16", "tf32"),
                                     ("fp32 hidden", tf.TOPK_MIXED, 1, "bf16", "bf16", "tf32"),
                                     ("fp32 weight", tf.TOPK_MIXED, 2, "bf16", "bf16", "tf32"),
                                     ("fp32", tf.TOPK_FP32, 0, "fp32", "fp32", "tf32x3")]:
    wd = f"tensordesc<{wdt}[{cfg.block_v}, {cfg.block_k}]>"
    args = dict(h_ptr=f"*{hdt}", h_lo_ptr=f"*{hdt}", w_src=wd, w_lo_src=wd, tiles_ptr="*i64",
                pairs_ptr="*i64", tile_v_ptr="*fp32", inv_t_ptr="*fp32", out_v_ptr="*fp32",
                out_i_ptr="*i32", V="i32", H="i32", K="i32", P="i32", stride_h="i32",
                stride_w="i32", inv_t="fp32")
    consts = dict(BLOCK_R=tr.RESCAN_ROWS, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k, KP=32,
                  USE_TMA=True, DOT_PRECISION=dot, UPCAST_DOT=False, ROW_INV_T=False,
                  LOGITS_DTYPE=None, LO=lo, OPAQUE_COLUMNS=True)
    kern = tr.rescan_kernel
    sig, cx = {}, {}
    for i, a in enumerate(kern.arg_names):
        if a in args: sig[a] = args[a]
        else: sig[a] = "constexpr"; cx[(i,)] = consts[a]
    stages = min(tr.RESCAN_STAGES, cfg.num_stages)
    c = triton.compile(ASTSource(kern, sig, constexprs=cx), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=tr.RESCAN_WARPS, num_stages=stages))
    open("/tmp/r.ptx", "w").write(c.asm["ptx"])
    r = subprocess.run([P + "/ptxas", "-v", "--gpu-name", "sm_90a", "/tmp/r.ptx", "-o", "/tmp/r.cubin"],
                       capture_output=True, text=True)
    print(f"{name}: stages {stages}, shared {c.metadata.shared} (limit 232448);",
          r.stderr.strip().splitlines()[-2].split(":", 1)[1].strip())
