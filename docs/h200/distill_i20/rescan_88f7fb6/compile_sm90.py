"""Compile topk_stats_kernel and rescan_kernel for sm_90a on CPU: regs/spills."""
import subprocess, sys, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from megatron_overlay.ops.kernels import topk_forward, topk_rescan
P = ".venv/core-0.19.2/lib/python3.12/site-packages/triton/backends/nvidia/bin"
KP = int(sys.argv[1]) if len(sys.argv) > 1 else 8
def build(kern, args, consts, nw, ns, tag):
    sig, cx = {}, {}
    for i, name in enumerate(kern.arg_names):
        if name in args: sig[name] = args[name]
        else: sig[name] = "constexpr"; cx[(i,)] = consts[name]
    c = triton.compile(ASTSource(kern, sig, constexprs=cx), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=nw, num_stages=ns))
    open(f".scratch/{tag}.ptx", "w").write(c.asm["ptx"])
    r = subprocess.run([P + "/ptxas", "-v", "--gpu-name", "sm_90a", f".scratch/{tag}.ptx", "-o",
                        f".scratch/{tag}.cubin"], capture_output=True, text=True)
    print(tag, "shared", c.metadata.shared, r.stderr.strip().splitlines()[-2:])
    subprocess.run(f"{P}/cuobjdump -sass .scratch/{tag}.cubin > .scratch/{tag}.sass", shell=True)
hd, wd = "tensordesc<bf16[128, 64]>", "tensordesc<bf16[256, 64]>"
build(topk_forward.topk_stats_kernel,
      dict(h_src=hd, h_lo_src=hd, w_src=wd, w_lo_src=wd, labels_ptr="*i64", part_ptr="*fp32",
           part_v_ptr="*fp32", part_i_ptr="*i32", inv_t_ptr="*fp32", N="i32", V="i32", H="i32",
           K="i32", stride_h="i32", stride_w="i32", inv_t="fp32", num_splits="i32",
           tiles_per_split="i32", chunk_tiles="i32", group_m="i32"),
      dict(BLOCK_M=128, BLOCK_V=256, BLOCK_K=64, KP=KP, WITH_ENTROPY=False, USE_TMA=True,
           DOT_PRECISION="tf32", UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=0,
           HAS_LABELS=False), 8, 3, f"topk_k{KP}")
build(topk_rescan.rescan_kernel,
      dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src=wd, w_lo_src=wd, tiles_ptr="*i64",
           pairs_ptr="*i64", tile_v_ptr="*fp32", inv_t_ptr="*fp32", out_v_ptr="*fp32",
           out_i_ptr="*i32", V="i32", H="i32", K="i32", P="i32", stride_h="i32",
           stride_w="i32", inv_t="fp32"),
      dict(BLOCK_R=int(__import__("os").environ.get("BR", 64)), BLOCK_V=256, BLOCK_K=64, KP=KP, USE_TMA=True, DOT_PRECISION="tf32",
           UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=0, OPAQUE_COLUMNS=True), int(__import__("os").environ.get("RW", 4)), 3, f"rescan_k{KP}")
