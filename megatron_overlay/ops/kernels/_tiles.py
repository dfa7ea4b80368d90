"""Tile helpers shared by the forward and backward kernels."""

import os

import triton
import triton.language as tl

# Triton's interpreter converts fp32 to bf16 toward zero (Triton 3.7, ``cast_impl``), where
# the GPU's cvt.rn rounds to nearest even, as cuBLAS does; there (only) ``to_16bit`` rounds
# by hand. Read when the kernels are defined, as launch.interpreting() is.
_INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def grouped_ids(pid, num_m, num_n, group_m):
    """(pid_m, pid_n) of work item ``pid`` in grouped order.

    Consecutive items walk ``group_m`` token tiles before moving along n, so the programs
    that run at the same time share a few hidden tiles and a few weight tiles in L2.
    """
    per_group = group_m * num_n
    group = pid // per_group
    first_m = group * group_m
    size_m = tl.minimum(num_m - first_m, group_m)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    return pid_m, pid_n


@triton.jit
def load_tile(src, row0, col0, n_rows, n_cols, stride,
              BR: tl.constexpr, BC: tl.constexpr, USE_TMA: tl.constexpr):
    """A [BR, BC] tile at (row0, col0) of a row-major matrix, zero outside it.

    ``src`` is a TMA tensor descriptor (Hopper: the bulk copy engine fills shared memory
    and zero-fills out-of-bounds boxes) or a plain pointer (any GPU, Triton's interpreter).
    """
    if USE_TMA:
        tile = src.load([row0, col0])
    else:
        rows = row0 + tl.arange(0, BR)
        cols = col0 + tl.arange(0, BC)
        ptrs = src + rows[:, None].to(tl.int64) * stride + cols[None, :]
        tile = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
    return tile


@triton.jit
def to_16bit(x, dtype: tl.constexpr):
    """fp32 ``x`` rounded to nearest even in the 16-bit ``dtype``."""
    if _INTERPRETED:
        if dtype == tl.bfloat16:  # RNE on the bits, then an exact conversion
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def split_hi_lo(x, dtype: tl.constexpr):
    """fp32 ``x`` as hi + lo in the 16-bit ``dtype`` (split_operand.py says why)."""
    hi = to_16bit(x, dtype)
    lo = to_16bit(x - hi.to(tl.float32), dtype)
    return hi, lo


@triton.jit
def dot_nt(a, b, acc, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b.T. ``UPCAST``: widen the operands to fp32 first (exact), for Triton's
    interpreter, whose bf16 dot returns garbage (Triton 3.7)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b.T, acc, input_precision=DOT_PRECISION)


@triton.jit
def mma_step(h_src, h_lo_src, w_src, w_lo_src, m0, v0, k0, N, V, H, stride_h, stride_w, acc,
             BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
             USE_TMA: tl.constexpr, LO: tl.constexpr, DOT_PRECISION: tl.constexpr,
             UPCAST: tl.constexpr):
    """One K step of a logits tile: acc + h[m0:, k0:] @ w[v0:, k0:].T.

    ``LO`` (mixed operands, split_operand.py): 0 none; 1 the hidden states are fp32, given
    as their hi part (``h_src``) and lo part (``h_lo_src``, same layout); 2 the weight is,
    likewise. lo's product first, then hi's, into the same fp32 accumulator.
    """
    a = load_tile(h_src, m0, k0, N, H, stride_h, BLOCK_M, BLOCK_K, USE_TMA)
    b = load_tile(w_src, v0, k0, V, H, stride_w, BLOCK_V, BLOCK_K, USE_TMA)
    a_lo, b_lo = a, b
    if LO == 1:
        a_lo = load_tile(h_lo_src, m0, k0, N, H, stride_h, BLOCK_M, BLOCK_K, USE_TMA)
    elif LO == 2:
        b_lo = load_tile(w_lo_src, v0, k0, V, H, stride_w, BLOCK_V, BLOCK_K, USE_TMA)
    return mixed_dot(a, a_lo, b, b_lo, acc, LO, DOT_PRECISION, UPCAST)


@triton.jit
def mixed_dot(a, a_lo, b, b_lo, acc, LO: tl.constexpr, DOT_PRECISION: tl.constexpr,
              UPCAST: tl.constexpr):
    """acc + a @ b.T in mma_step's order (also the top-k rescan's, whose hidden rows are
    gathered): ``LO`` 1, a_lo @ b.T first (a, a_lo: fp32 hidden states' hi and lo parts);
    2, a @ b_lo.T first (the weight's); then hi's product, into the same fp32 accumulator.
    The lo part not in use is ignored."""
    if LO == 1:
        acc = dot_nt(a_lo, b, acc, DOT_PRECISION, UPCAST)
    elif LO == 2:
        acc = dot_nt(a, b_lo, acc, DOT_PRECISION, UPCAST)
    return dot_nt(a, b, acc, DOT_PRECISION, UPCAST)


@triton.jit
def round_logits(acc, LOGITS_DTYPE: tl.constexpr):
    """The fp32 logits tile as a head in ``LOGITS_DTYPE`` gives it (each logit rounded to
    nearest even once, as cuBLAS writes a 16-bit GEMM's output), back in fp32; None: as
    it is (an fp32 head)."""
    if LOGITS_DTYPE is not None:
        acc = to_16bit(acc, LOGITS_DTYPE).to(tl.float32)
    return acc
