"""Tile helpers shared by the forward and backward kernels."""

import triton
import triton.language as tl


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
def dot_nt(a, b, acc, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b.T. ``UPCAST``: widen the operands to fp32 first (exact), for Triton's
    interpreter, whose bf16 dot returns garbage (Triton 3.7)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b.T, acc, input_precision=DOT_PRECISION)
