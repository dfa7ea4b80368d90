"""Pass 18 (CPU machine, no GPU): the top-k kernels compiled ahead of time for sm_90a
(triton.compile with a GPUTarget, then ptxas -v): registers and spills a kernel, under the
Triton the device has (3.6.0, pip install --target /tmp/t36) and the CPU venv's (3.7.1):

    PYTHONPATH=/tmp/t36 .venv/core-0.19.2/bin/python docs/h200/pass18/aot_sm90.py
    .venv/core-0.19.2/bin/python docs/h200/pass18/aot_sm90.py
"""
import os, subprocess, tempfile
import triton, triton.language as tl
print(triton.__version__)
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from megatron_overlay.ops.kernels import topk_forward as tf, topk_rescan as tr, merge_topk as mt
target = GPUTarget("cuda", 90, 32)
def ptxas_v(fn, sig, cx, **opts):
    names = fn.arg_names
    cx = {(names.index(k),): v for k, v in cx.items()}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx), target=target, options=opts)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"], capture_output=True, text=True)
    return [l.split("info    :")[-1].strip() for l in (r.stderr + r.stdout).splitlines() if "registers" in l or "spill" in l]
def sig_of(fn, cx, types):
    return {a: ("constexpr" if a in cx else types.get(a, "i32")) for a in fn.arg_names}
# forward kernel
for second in (1, 2):
    cx = dict(h_lo_src=None, w_lo_src=None, BLOCK_M=128, BLOCK_V=256, BLOCK_K=64, ARGMAX=False, SECOND=second,
              WITH_ENTROPY=True, USE_TMA=True, DOT_PRECISION="tf32", UPCAST_DOT=False, ROW_INV_T=False,
              LOGITS_DTYPE=None, LO=0, HAS_LABELS=True)
    types = dict(h_src="tensordesc<bf16[128,64]>", w_src="tensordesc<bf16[256,64]>", labels_ptr="*i64",
                 part_ptr="*fp32", top_v_ptr="*fp32", top_i_ptr="*i32", top_s_ptr="*fp32", inv_t_ptr="*fp32", inv_t="fp32")
    print("topk_stats SECOND", second, ptxas_v(tf.topk_stats_kernel, sig_of(tf.topk_stats_kernel, cx, types), cx, num_warps=8, num_stages=3))
# rescan
cx = dict(BLOCK_R=64, BLOCK_V=256, BLOCK_K=64, KP=32, NB=1024, USE_TMA=True, DOT_PRECISION="tf32", UPCAST_DOT=False,
          ROW_INV_T=False, LOGITS_DTYPE=None, LO=0, OPAQUE_COLUMNS=True, PAD=2**63-1, w_lo_src=None)
types = dict(h_ptr="*bf16", h_lo_ptr="*bf16", w_src="tensordesc<bf16[256,64]>", runs_ptr="*i32", pairs_ptr="*i32",
             tile_v_ptr="*fp32", tile_i_ptr="*i64", inv_t_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i32", inv_t="fp32")
print("rescan", ptxas_v(tr.rescan_kernel, sig_of(tr.rescan_kernel, cx, types), cx, num_warps=8, num_stages=3))
# select tiles and merge
for codes in (1, 2):
    cx = dict(BLOCK_R=2, WIDTH=1024, KP=32, PAD=2**63-1, CODES=codes)
    types = dict(tile_max_ptr="*fp32", packed_ptr="*i32", second_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i64")
    print("select", codes, ptxas_v(mt.select_tiles_kernel, sig_of(mt.select_tiles_kernel, cx, types), cx, num_warps=2))
    cx = dict(BLOCK_R=8, WIDTH=1024, PAD=2**63-1, SLOT_IDS=True, CODES=codes, KP=8)
    types = dict(part_v_ptr="*fp32", part_i_ptr="*i32", second_ptr="*fp32", out_v_ptr="*fp32", out_i_ptr="*i64")
    print("merge", codes, ptxas_v(mt.merge_topk_kernel, sig_of(mt.merge_topk_kernel, cx, types), cx, num_warps=8))
