"""sm_90a compile (Triton 3.6.0 on the CPU machine) of tile_sort's kernels and the rescan with
int32 tiles/pairs: shared memory and registers."""
import os, subprocess, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from megatron_overlay.ops.kernels import tile_sort as ts, topk_forward as tf, topk_rescan as tr
P = os.path.dirname(triton.__file__) + "/backends/nvidia/bin"
print(triton.__version__)
def comp(kern, args, consts, warps, stages=1):
    sig, cx = {}, {}
    for i, a in enumerate(kern.arg_names):
        if a in args: sig[a] = args[a]
        else: sig[a] = "constexpr"; cx[(i,)] = consts[a]
    c = triton.compile(ASTSource(kern, sig, constexprs=cx), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=stages))
    open("/tmp/r.ptx", "w").write(c.asm["ptx"])
    r = subprocess.run([P + "/ptxas", "-v", "--gpu-name", "sm_90a", "/tmp/r.ptx", "-o", "/tmp/r.cubin"],
                       capture_output=True, text=True)
    print(kern.__name__, "shared", c.metadata.shared, r.stderr.strip().splitlines()[-2].split(":", 1)[1].strip())
comp(ts.tile_histogram_kernel, dict(tiles_ptr="*i64", counts_ptr="*i32", P="i32", num_t="i32"),
     dict(BLOCK=ts.SORT_BLOCK, NB=1024), ts.SORT_WARPS)
comp(ts.tile_scatter_kernel, dict(tiles_ptr="*i64", counts_ptr="*i32", out_tiles_ptr="*i32",
     out_pairs_ptr="*i32", P="i32", num_t="i32", num_blocks="i32"),
     dict(BLOCK=ts.SORT_BLOCK, NB=1024, COUNT_ROWS=ts.COUNT_ROWS), ts.SORT_WARPS)
cfg = tf.TOPK_16BIT
wd = f"tensordesc<bf16[{cfg.block_v}, {cfg.block_k}]>"
comp(tr.rescan_kernel, dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src=wd, w_lo_src=wd, tiles_ptr="*i32",
     pairs_ptr="*i32", tile_v_ptr="*fp32", inv_t_ptr="*fp32", out_v_ptr="*fp32",
     out_i_ptr="*i32", V="i32", H="i32", K="i32", P="i32", stride_h="i32", stride_w="i32", inv_t="fp32"),
     dict(BLOCK_R=tr.RESCAN_ROWS, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k, KP=32,
          USE_TMA=True, DOT_PRECISION="tf32", UPCAST_DOT=False, ROW_INV_T=False,
          LOGITS_DTYPE=None, LO=0, OPAQUE_COLUMNS=True), tr.RESCAN_WARPS, min(tr.RESCAN_STAGES, cfg.num_stages))
