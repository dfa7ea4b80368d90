"""Does Triton's tl.range(warp_specialize=True) warp-specialize anything on sm_90a? (CPU
machine, ahead-of-time compile, no GPU.) The log-prob forward's last 1-4% over the GEMM is
its epilogue, which no MMA overlaps; a warp-specialized (ping-pong) kernel would hide it.
Pass 8 found Triton 3.6 does not apply warp_specialize to the forward kernel's inner K loop
on sm_90 (docs/BENCHMARKS.md). This tries the placement of Triton's persistent-matmul
tutorial (the outer tile loop, flattened or not) on a minimal TMA matmul with a row-max
epilogue and on the forward kernel's own loop nest; it looks for the ttg.warp_specialize op
in the TTGIR and setmaxnreg in the PTX, and prints ptxas's registers.

    pip install --no-deps --target /tmp/t36 triton==3.6.0      (the device's Triton)
    PYTHONPATH=/tmp/t36:. .venv/core-0.19.2/bin/python docs/cpu/ws_sm90_probe.py
"""
import os
import subprocess
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from megatron_overlay.ops.kernels._online_stats import empty_stats, store_stats, work_item
from megatron_overlay.ops.kernels._tiles import mma_step
from megatron_overlay.ops.kernels.logprob_forward import _fold_tile

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def persistent_mm(a_desc, b_desc, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, WS_INNER: tl.constexpr, WS_OUTER: tl.constexpr,
                  FLAT: tl.constexpr):
    num_n = tl.cdiv(N, BN)
    for t in tl.range(tl.program_id(0), tl.cdiv(M, BM) * num_n, 132, flatten=FLAT,
                      warp_specialize=WS_OUTER):
        m0 = (t // num_n) * BM
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS_INNER):
            acc = tl.dot(a_desc.load([m0, k * BK]), b_desc.load([(t % num_n) * BN, k * BK]).T,
                         acc)
        tl.store(c_ptr + m0 + tl.arange(0, BM), tl.max(acc, axis=1))


@triton.jit
def forward_outer_ws(h_src, h_lo_src, w_src, w_lo_src, labels_ptr, part_ptr, inv_t_ptr,
                     N, V, H, stride_h, stride_w, inv_t, num_splits, tiles_per_split, group_m,
                     BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
                     WITH_ENTROPY: tl.constexpr, USE_TMA: tl.constexpr,
                     WS_OUTER: tl.constexpr, FLAT: tl.constexpr, DOT_PRECISION: tl.constexpr,
                     UPCAST_DOT: tl.constexpr, ROW_INV_T: tl.constexpr,
                     LOGITS_DTYPE: tl.constexpr, LO: tl.constexpr, HAS_LABELS: tl.constexpr):
    # logprob_forward.forward_stats_kernel's nested loop (LOOP 0 / 1), warp_specialize on
    # the vocab-tile loop instead of the K loop
    split, m0, rows, labels, inv_t, inv_t_col, v_begin, v_end = work_item(
        labels_ptr, inv_t_ptr, inv_t, N, V, num_splits, tiles_per_split, group_m,
        BLOCK_M, BLOCK_V, ROW_INV_T, HAS_LABELS)
    a_i, s_i, t_i, zl_i = empty_stats(BLOCK_M)
    for vt in tl.range(v_begin, v_end, flatten=FLAT, warp_specialize=WS_OUTER):
        acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
        for kk in tl.range(0, tl.cdiv(H, BLOCK_K)):
            acc = mma_step(h_src, h_lo_src, w_src, w_lo_src, m0, vt * BLOCK_V, kk * BLOCK_K,
                           N, V, H, stride_h, stride_w, acc, BLOCK_M, BLOCK_V, BLOCK_K,
                           USE_TMA, LO, DOT_PRECISION, UPCAST_DOT)
        a_i, s_i, t_i, zl_i = _fold_tile(acc, vt * BLOCK_V, labels, V, inv_t, inv_t_col,
                                          a_i, s_i, t_i, zl_i, BLOCK_V, WITH_ENTROPY,
                                          LOGITS_DTYPE, HAS_LABELS)
    store_stats(part_ptr, split, rows, N, inv_t, a_i, s_i, t_i, zl_i)


def probe(fn, constexprs, types, num_warps):
    names = fn.arg_names
    sig = {a: "constexpr" if a in constexprs else types.get(a, "i32") for a in names}
    cx = {(names.index(k),): v for k, v in constexprs.items()}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx), target=TARGET,
                       options=dict(num_warps=num_warps, num_stages=3))
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"],
                       capture_output=True, text=True)
    regs = [line.split("info    :")[-1].strip() for line in (r.stderr + r.stdout).splitlines()
            if "Used" in line]
    return (f"ttg.warp_specialize {'ttg.warp_specialize' in k.asm['ttgir']}, "
            f"setmaxnreg {'setmaxnreg' in k.asm['ptx']}, {regs}")


print("triton", triton.__version__, "target sm_90a")
mm_types = dict(a_desc="tensordesc<bf16[128,64]>", b_desc="tensordesc<bf16[256,64]>",
                c_ptr="*fp32")
for inner, outer, flat, warps in ((False, False, True, 8), (True, False, True, 8),
                                  (False, True, True, 8), (False, True, False, 8),
                                  (False, True, True, 4), (True, False, True, 4)):
    cx = dict(BM=128, BN=256, BK=64, WS_INNER=inner, WS_OUTER=outer, FLAT=flat)
    print(f"persistent_mm ws_inner={inner} ws_outer={outer} flatten={flat} warps={warps}:",
          probe(persistent_mm, cx, mm_types, warps))
fwd_types = dict(h_src="tensordesc<bf16[128,64]>", w_src="tensordesc<bf16[256,64]>",
                 labels_ptr="*i64", part_ptr="*fp32", inv_t_ptr="*fp32", inv_t="fp32")
for outer, flat, warps in ((False, False, 8), (True, False, 8), (True, True, 8)):
    cx = dict(h_lo_src=None, w_lo_src=None, BLOCK_M=128, BLOCK_V=256, BLOCK_K=64,
              WITH_ENTROPY=True, USE_TMA=True, WS_OUTER=outer, FLAT=flat, DOT_PRECISION="tf32",
              UPCAST_DOT=False, ROW_INV_T=False, LOGITS_DTYPE=None, LO=0, HAS_LABELS=True)
    print(f"forward ws_outer={outer} flatten={flat} warps={warps}:",
          probe(forward_outer_ws, cx, fwd_types, warps))
