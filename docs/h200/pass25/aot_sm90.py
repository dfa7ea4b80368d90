"""Pass 25 (CPU machine, no GPU): this pass's kernels compiled ahead of time for sm_90a
(triton.compile with a GPUTarget, then ptxas -v): registers and spills a kernel, under the
device's Triton (3.6.0, pip install --no-deps --target /tmp/t36) and the CPU venv's:

    PYTHONPATH=/tmp/t36:. .venv/core-0.19.2/bin/python docs/h200/pass25/aot_sm90.py
    PYTHONPATH=. .venv/core-0.19.2/bin/python docs/h200/pass25/aot_sm90.py

The rescan (one part, 64 and 128 rows at 8 warps; 2, 4 and 8 parts at 64 rows, 4 warps
below 128 columns a part), the scatter of tile_sort (a lone block with and without
SORT_FEW, several blocks) and merge_runs with parts.
"""
import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from megatron_overlay.ops.kernels import merge_runs as mr
from megatron_overlay.ops.kernels import tile_sort as ts
from megatron_overlay.ops.kernels import topk_rescan as tr

print("triton", triton.__version__)
target = GPUTarget("cuda", 90, 32)


def ptxas_v(fn, types, cx, **opts):
    sig = {a: ("constexpr" if a in cx else types.get(a, "i32")) for a in fn.arg_names}
    cx = {(fn.arg_names.index(k),): v for k, v in cx.items()}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx), target=target,
                       options=opts)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"],
                       capture_output=True, text=True)
    return [line.split("info    :")[-1].strip() for line in (r.stderr + r.stdout).splitlines()
            if "registers" in line or "spill" in line]


for parts, rows, warps, k in ((1, 64, 8, 8), (1, 128, 8, 8), (2, 64, 8, 8), (4, 64, 4, 8),
                              (8, 64, 4, 8), (4, 64, 4, 32)):
    pw = 256 // parts
    cx = dict(BLOCK_R=rows, BLOCK_V=256, BLOCK_K=64, KP=triton.next_power_of_2(k),
              NB=1024, PARTS=parts, USE_TMA=True, DOT_PRECISION="tf32", UPCAST_DOT=False,
              ROW_INV_T=False, LOGITS_DTYPE=None, LO=0, OPAQUE_COLUMNS=True, PAD=2 ** 63 - 1,
              w_lo_src=None)
    types = dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src=f"tensordesc<bf16[{pw},64]>",
                 runs_ptr="*i32", pairs_ptr="*i32", tile_v_ptr="*fp32", tile_i_ptr="*i64",
                 inv_t_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i32", inv_t="fp32")
    print(f"rescan parts {parts} rows {rows} warps {warps} k {k}",
          ptxas_v(tr.rescan_kernel, types, cx, num_warps=warps, num_stages=3), flush=True)
for one_block, few in ((True, 128), (True, 0), (False, 0)):
    cx = dict(BLOCK=2048, NB=1024, COUNT_ROWS=8, ONE_BLOCK=one_block, FEW=few)
    types = dict(tiles_ptr="*i64", counts_ptr="*i32", out_tiles_ptr="*i32",
                 out_pairs_ptr="*i32", runs_ptr="*i32")
    print(f"tile_scatter one_block {one_block} few {few}",
          ptxas_v(ts.tile_scatter_kernel, types, cx, num_warps=8), flush=True)
for parts, k in ((1, 8), (4, 8), (4, 32)):
    kp = triton.next_power_of_2(parts * k)
    cx = dict(BLOCK_R=max(1, 1024 // kp), KP=kp, PARTS=parts, PAD=2 ** 63 - 1, FINALIZE=False,
              HAS_LABELS=False, WITH_ENTROPY=False)
    types = dict(cand_v_ptr="*fp32", cand_i_ptr="*i32", out_v_ptr="*fp32", out_i_ptr="*i64",
                 stats_ptr="*fp32", labels_ptr="*i64", lse_ptr="*fp32", mean_z_ptr="*fp32",
                 ent_ptr="*fp32", lp_ptr="*fp32", valid_ptr="*i8", bad_ptr="*i8",
                 rec_ptr="*i32")
    print(f"merge_runs parts {parts} k {k}", ptxas_v(mr.merge_runs_kernel, types, cx,
                                                     num_warps=4), flush=True)
