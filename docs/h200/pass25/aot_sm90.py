"""Pass 25 (CPU machine, no GPU): this pass's kernels compiled ahead of time for sm_90a
(triton.compile with a GPUTarget, then ptxas -v): registers and spills a kernel, under the
device's Triton (3.6.0, pip install --no-deps --target /tmp/t36) and the CPU venv's:

    PYTHONPATH=/tmp/t36:. .venv/core-0.19.2/bin/python docs/h200/pass25/aot_sm90.py
    PYTHONPATH=. .venv/core-0.19.2/bin/python docs/h200/pass25/aot_sm90.py

The rescan at 64 rows (the sparse path) with 3 to 6 pipeline stages and at 128 (the
dense path), each without and with the next step's rows prefetched (RESCAN_PREFETCH), and the scatter of tile_sort (a lone block with and without SORT_FEW,
several blocks): registers, spills and shared memory (227 KB a block on sm_90).
"""
import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

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
            if "registers" in line or "spill" in line] + [f"shared {k.metadata.shared} bytes"]


for rows, stages, prefetch in ((64, 3, False), (64, 4, False), (64, 6, False), (128, 3, False),
                               (64, 3, True), (64, 4, True), (128, 3, True)):
    cx = dict(BLOCK_R=rows, BLOCK_V=256, BLOCK_K=64, KP=8, NB=1024, USE_TMA=True,
              DOT_PRECISION="tf32", UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=0,
              OPAQUE_COLUMNS=True, PAD=2 ** 63 - 1, w_lo_src=None, PREFETCH=prefetch)
    types = dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src="tensordesc<bf16[256,64]>",
                 runs_ptr="*i32", pairs_ptr="*i32", tile_v_ptr="*fp32", tile_i_ptr="*i64",
                 inv_t_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i32", inv_t="fp32")
    print(f"rescan rows {rows} stages {stages} prefetch {prefetch}",
          ptxas_v(tr.rescan_kernel, types, cx, num_warps=8, num_stages=stages), flush=True)
for one_block, few in ((True, 128), (True, 0), (False, 0)):
    cx = dict(BLOCK=2048, NB=1024, COUNT_ROWS=8, ONE_BLOCK=one_block, FEW=few)
    types = dict(tiles_ptr="*i64", counts_ptr="*i32", out_tiles_ptr="*i32",
                 out_pairs_ptr="*i32", runs_ptr="*i32")
    print(f"tile_scatter one_block {one_block} few {few}",
          ptxas_v(ts.tile_scatter_kernel, types, cx, num_warps=8), flush=True)
