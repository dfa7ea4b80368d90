"""Compile the top-k forward kernel's second-maxima form (SECOND, k >= 32) for sm_90a on the
CPU (no GPU): registers, spills, SASS size, for the 16-bit tile (TMA and pointer loads),
fp32 operands (3xTF32, their 128 x 64 tile) and a mixed pair (an fp32 weight as hi + lo
bf16 halves), of a package given by its sys.path entry and name, e.g.

    python docs/h200/pass10_cpu/compile_second.py . megatron_overlay
    python docs/h200/pass10_cpu/compile_second.py .scratch/base10 megatron_overlay_base
"""
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, sys.argv[1])
import triton  # noqa: E402
from sm90a import compile_sm90a  # noqa: E402

tf = importlib.import_module(f"{sys.argv[2]}.ops.kernels.topk_forward")


print("triton", triton.__version__, sys.argv[2])
# (name, hidden operand, weight operand, tile M, V, K, DOT_PRECISION, LO, TMA, stages)
forms = [("bf16 TMA", "bf16", "bf16", 128, 256, 64, "tf32", 0, True, 3),
         ("bf16 pointers", "bf16", "bf16", 128, 256, 64, "tf32", 0, False, 3),
         ("fp32 3xTF32", "fp32", "fp32", 128, 64, 32, "tf32x3", 0, True, 3),
         ("fp32 weight as bf16 hi + lo", "bf16", "bf16", 128, 256, 64, "tf32", 2, True, 2)]
for name, h_t, w_t, bm, bv, bk, prec, lo, tma, stages in forms:
    h_src = f"tensordesc<{h_t}[{bm}, {bk}]>" if tma else f"*{h_t}"
    w_src = f"tensordesc<{w_t}[{bv}, {bk}]>" if tma else f"*{w_t}"
    args = dict(h_src=h_src, h_lo_src=h_src, w_src=w_src, w_lo_src=w_src, labels_ptr="*i64",
                part_ptr="*fp32", top_v_ptr="*fp32", top_i_ptr="*i32", inv_t_ptr="*fp32",
                N="i32", V="i32", H="i32", stride_h="i32", stride_w="i32", inv_t="fp32",
                num_splits="i32", tiles_per_split="i32", chunk_tiles="i32", group_m="i32")
    for row in (False, True):
        consts = dict(BLOCK_M=bm, BLOCK_V=bv, BLOCK_K=bk, ARGMAX=False, SECOND=True,
                      WITH_ENTROPY=True, USE_TMA=tma, DOT_PRECISION=prec, UPCAST_DOT=False,
                      ROW_INV_T=row, LOGITS_DTYPE=None, LO=lo, HAS_LABELS=False)
        print(f"SECOND {name:28s} row_inv_t={row!s:5s}", compile_sm90a(
            tf.topk_stats_kernel, args, consts, 8, stages)[0])
