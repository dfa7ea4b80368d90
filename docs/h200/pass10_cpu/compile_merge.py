"""Compile the rescan's merge both ways for sm_90a on the CPU (no GPU): merge_topk.py's k
extractions over the row's k (k + 1) / 2 candidates, as the rescan launched it before,
and merge_runs.py's k-way merge; registers, spills, SASS size.

    python docs/h200/pass10_cpu/compile_merge.py .    # from the repo root
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import triton  # noqa: E402
from sm90a import compile_sm90a  # noqa: E402

from megatron_overlay.ops.kernels import merge_runs, merge_topk  # noqa: E402
from megatron_overlay.ops.kernels.launch import next_power_of_2  # noqa: E402

print("triton", triton.__version__)
for k in (8, 32, 256):
    width = next_power_of_2(k * (k + 1) // 2)
    rows = max(1, min(64, merge_topk.MERGE_TOPK_ELEMENTS // width))
    old, body_old = compile_sm90a(merge_topk.merge_topk_kernel, dict(
        part_v_ptr="*fp32", part_i_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64", N="i32",
        V="i32", W="i32", K="i32", num_splits="i32", stride_s="i32", stride_r="i32",
        stride_w="i32", block_v="i32"), dict(BLOCK_R=rows, WIDTH=width, PAD=2 ** 63 - 1,
        SLOT_IDS=False, CODES=False, KP=1), 4 if width <= 1024 else 8)
    print(f"k = {k:3d} merge_topk  ({rows:3d} rows x {width:5d} keys): {old}; "
          f"warp instructions a row and step {body_old * (4 if width <= 1024 else 8) / rows:.1f}")
    runs = next_power_of_2(k)
    rows = max(1, merge_runs.MERGE_RUNS_KEYS // runs)
    new, body_new = compile_sm90a(merge_runs.merge_runs_kernel, dict(
        cand_v_ptr="*fp32", cand_i_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64", N="i32",
        V="i32", K="i32"), dict(BLOCK_R=rows, KP=runs, PAD=2 ** 63 - 1), 4)
    print(f"k = {k:3d} merge_runs  ({rows:3d} rows x {runs:5d} keys): {new}; "
          f"warp instructions a row and step {body_new * 4 / rows:.1f}")

# best_tiles: k extractions (merge_topk_kernel, 8 rows x 1024 tiles' maxima, codes) against
# the selection (select_tiles_kernel): warp instructions a row, the loops' trips counted
num_t = 594  # V = 151936 in 256-column tiles
width = next_power_of_2(num_t)
margs = dict(part_v_ptr="*fp32", part_i_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64", N="i32",
             V="i32", W="i32", K="i32", num_splits="i32", stride_s="i32", stride_r="i32",
             stride_w="i32", block_v="i32")
sargs = dict(tile_max_ptr="*fp32", second_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64",
             N="i32", num_t="i32", K="i32", block_v="i32")
for k in (8, 16, 32):
    rows = max(1, min(64, max(merge_topk.MERGE_TOPK_ELEMENTS, min(8 * width, 8192)) // width))
    old, body = compile_sm90a(merge_topk.merge_topk_kernel, margs, dict(
        BLOCK_R=rows, WIDTH=width, PAD=2 ** 63 - 1, SLOT_IDS=True, CODES=True,
        KP=next_power_of_2(k)), 4)
    print(f"k = {k:3d} best_tiles by extraction ({rows} rows x {width} tiles): {old}; warp "
          f"instructions a row, the loop's {k} trips {body * k * 4 / rows:.0f}")
    rows, warps = merge_topk.SELECT_ROWS, merge_topk.SELECT_WARPS
    new, body = compile_sm90a(merge_topk.select_tiles_kernel, sargs, dict(
        BLOCK_R=rows, WIDTH=width, KP=next_power_of_2(k), PAD=2 ** 63 - 1, CODES=True), warps)
    total = int(re.search(r"SASS (\d+)", new).group(1))
    print(f"k = {k:3d} best_tiles by selection  ({rows} rows x {width} tiles): {new}; warp "
          f"instructions a row, the loop's 31 trips and the rest once "
          f"{(body * 31 + total - body) * warps / rows:.0f}")

# the selection at the widest rows it takes (MERGE_TOPK_MAX_CANDIDATES tiles: V = 2M)
for width in (2048, 8192):
    rows = max(1, min(merge_topk.SELECT_ROWS, merge_topk.SELECT_ELEMENTS // width))
    new, _ = compile_sm90a(merge_topk.select_tiles_kernel, sargs, dict(
        BLOCK_R=rows, WIDTH=width, KP=32, PAD=2 ** 63 - 1, CODES=True), merge_topk.SELECT_WARPS)
    print(f"k =  32 best_tiles by selection  ({rows} rows x {width} tiles): {new}")
