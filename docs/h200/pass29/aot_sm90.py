"""Pass 29 (CPU machine, no GPU): the top-k tail's kernels compiled ahead of time for
sm_90a under the device's Triton (3.6.0: pip install --no-deps --target /tmp/t36
triton==3.6.0), with the divisibility by 16 that a launch gives the pointers and the
ints that are multiples of 16 (H, the row strides: Triton specializes them), which pass
25's aot_sm90.py left out: registers, spills and shared memory (227 KB a block on sm_90);
for the rescan, whether its gathered hidden rows are staged (cp.async) beside the
weight's TMA tiles.

    PYTHONPATH=/tmp/t36:. .venv/core-0.19.2/bin/python docs/h200/pass29/aot_sm90.py
"""
import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from megatron_overlay.ops.kernels import merge_topk as mt
from megatron_overlay.ops.kernels import tile_sort as ts
from megatron_overlay.ops.kernels import topk_rescan as tr

print("triton", triton.__version__)
target = GPUTarget("cuda", 90, 32)


def compile_(fn, types, cx, divisible=(), **opts):
    sig = {a: ("constexpr" if a in cx else types.get(a, "i32")) for a in fn.arg_names}
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in divisible}
    cx = {(fn.arg_names.index(k),): v for k, v in cx.items()}
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx, attrs=attrs),
                          target=target, options=opts)


def ptxas_v(k):
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"],
                       capture_output=True, text=True)
    return [line.split("info    :")[-1].strip() for line in (r.stderr + r.stdout).splitlines()
            if "registers" in line or "spill" in line] + [f"shared {k.metadata.shared} bytes"]


RESCAN_DIVISIBLE = ("h_ptr", "h_lo_ptr", "runs_ptr", "pairs_ptr", "tile_v_ptr", "tile_i_ptr",
                    "inv_t_ptr", "out_v_ptr", "out_i_ptr", "H", "stride_h", "stride_w", "K")
for stages, divisible in ((4, ()), (4, RESCAN_DIVISIBLE), (5, RESCAN_DIVISIBLE),
                          (6, RESCAN_DIVISIBLE)):
    cx = dict(BLOCK_R=64, BLOCK_V=256, BLOCK_K=64, KP=8, NB=1024, USE_TMA=True,
              DOT_PRECISION="tf32", UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=0,
              OPAQUE_COLUMNS=True, PAD=2 ** 63 - 1, w_lo_src=None, PREFETCH=False)
    types = dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src="tensordesc<bf16[256,64]>",
                 runs_ptr="*i32", pairs_ptr="*i32", tile_v_ptr="*fp32", tile_i_ptr="*i64",
                 inv_t_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i32", inv_t="fp32")
    k = compile_(tr.rescan_kernel, types, cx, divisible, num_warps=8, num_stages=stages)
    print(f"rescan 64 rows, {stages} stages, divisibility {'given' if divisible else 'none'}:"
          f" cp.async in the PTX {k.asm['ptx'].count('cp.async.cg') + k.asm['ptx'].count('cp.async.ca')},",
          ptxas_v(k), flush=True)
for block in (2048, 4096, 8192):
    for warps in (4, 8):
        cx = dict(BLOCK=block, NB=1024, COUNT_ROWS=8, ONE_BLOCK=True, FEW=128)
        types = dict(tiles_ptr="*i64", counts_ptr="*i32", out_tiles_ptr="*i32",
                     out_pairs_ptr="*i32", runs_ptr="*i32")
        print(f"tile_scatter lone block of {block}, {warps} warps",
              ptxas_v(compile_(ts.tile_scatter_kernel, types, cx, num_warps=warps)), flush=True)
types = dict(part_v_ptr="*fp32", part_i_ptr="*i32", second_ptr="*fp32", out_v_ptr="*fp32",
             out_i_ptr="*i64", stats_ptr="*fp32", labels_ptr="*i64", lse_ptr="*fp32",
             mean_z_ptr="*fp32", ent_ptr="*fp32", lp_ptr="*fp32", valid_ptr="*i1", bad_ptr="*i1",
             rec_ptr="*i64")
# (rows, width, codes, warps, finalize): best tiles (codes 1, 594 tiles: width 1024) at
# 8 / 2 / 1 rows; merge_runs' extractions at k = 8 (36 candidates: width 64, 16 rows a
# program at 1024) and k = 32 (528: width 1024, 1 / 4 rows)
for rows, width, codes, warps, fin in ((8, 1024, 1, 4, False), (2, 1024, 1, 4, False),
                                       (1, 1024, 1, 4, False), (16, 64, 0, 4, True),
                                       (1, 1024, 0, 4, True), (4, 1024, 0, 4, True)):
    cx = dict(BLOCK_R=rows, WIDTH=width, PAD=2 ** 63 - 1, SLOT_IDS=bool(codes), CODES=codes,
              KP=8 if codes else 1, FINALIZE=fin, HAS_LABELS=False, WITH_ENTROPY=False)
    print(f"merge_topk {rows} rows x {width}, codes {codes}, {warps} warps, finalize {fin}",
          ptxas_v(compile_(mt.merge_topk_kernel, types, cx, num_warps=warps)), flush=True)
