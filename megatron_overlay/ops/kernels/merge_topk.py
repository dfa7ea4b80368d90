"""Merge per-split candidate lists [S, N, W] into each row's ordered best k [N, k] (k <= S W).

The top-k forward merges twice: its splits' lists of candidate vocab tiles (W = k), and
the rescan's candidates ([1, N, k (k + 1) / 2], topk_rescan.py).

One launch in place of topk_merge.order_candidates' sorts (about twenty small launches of
host work a call). Each candidate becomes one int64 key that orders as the contract does:
the high 32 bits are the value's fp32 bits made monotonic (``key32``: a bigger float, a
bigger signed int; -0.0 counted as +0.0, as a float compare does), the low 32 bits
0xFFFFFFFF - id, so that of equal values the lower id has the bigger key. Keys are
distinct (ids are), and k extractions of the row maximum give the order; each key decodes
back to its value and id. A NaN value (a row whose temperature was invalid: every value
of the row is NaN) is keyed as -inf and written back as NaN, as order_candidates does.

The kernel's unfilled slots (ids >= the shard's vocab, value -inf; the same placeholder
id in several splits) are keyed by their place instead, and come out as (-inf, PAD_ID).
"""

import torch
import triton
import triton.language as tl

from ..topk_merge import PAD_ID
from .launch import cdiv, launch, next_power_of_2

# Candidates a program holds: rows per program = this // the candidates a row has (>= 1).
MERGE_TOPK_ELEMENTS = 4096


@triton.jit
def _key32(value):
    """int32 whose signed order is the float order of ``value`` (NaN: as -inf)."""
    value = tl.where(value != value, float("-inf"), value) + 0.0  # -0.0 + 0.0 = +0.0
    bits = value.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _value(key32):
    bits = key32 ^ ((key32 >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def merge_topk_kernel(part_v_ptr, part_i_ptr, out_v_ptr, out_i_ptr, N, V, W, K, num_splits,
                      BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, PAD: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    w = tl.arange(0, WIDTH)
    split, slot = w // W, w % W
    live = (rows[:, None] < N) & (split[None, :] < num_splits)
    src = (split[None, :].to(tl.int64) * N + rows[:, None]) * W + slot[None, :]
    values = tl.load(part_v_ptr + src, mask=live, other=float("-inf"))
    ids = tl.load(part_i_ptr + src, mask=live, other=0)
    nan_row = tl.max((values != values).to(tl.int32), axis=1) > 0
    ids = tl.where(ids < V, ids, V + w[None, :])  # unfilled slots: distinct keys too
    keys = (_key32(values).to(tl.int64) << 32) | (0xFFFFFFFF - ids.to(tl.int64))
    keys = tl.where(live, keys, -9223372036854775807 - 1)
    out = rows.to(tl.int64) * K
    for i in range(K):
        best = tl.max(keys, axis=1)
        key_id = 0xFFFFFFFF - (best & 0xFFFFFFFF)
        value = _value((best >> 32).to(tl.int32))
        value = tl.where(nan_row, float("nan"), value)
        tl.store(out_v_ptr + out + i, value, mask=rows < N)
        tl.store(out_i_ptr + out + i, tl.where(key_id < V, key_id, PAD), mask=rows < N)
        keys = tl.where(keys == best[:, None], -9223372036854775807 - 1, keys)


def merge_topk(part_v: torch.Tensor, part_i: torch.Tensor, vocab: int, k: int | None = None,
               out: tuple[torch.Tensor, torch.Tensor] | None = None):
    """([N, k] fp32 values, int64 ids) of [S, N, W] per-split lists (int32 ids; >= vocab:
    unfilled), in the contract's order: descending value, ties to the lower id; k: W unless
    given; ``out``: contiguous [N, k] values and ids to write them to."""
    splits, n_rows, width_split = part_v.shape
    k = width_split if k is None else k
    values, ids = out if out is not None else (
        torch.empty(n_rows, k, dtype=torch.float32, device=part_v.device),
        torch.empty(n_rows, k, dtype=torch.int64, device=part_v.device))
    width = next_power_of_2(splits * width_split)
    block_r = max(1, min(64, MERGE_TOPK_ELEMENTS // width))
    launch(merge_topk_kernel, (cdiv(n_rows, block_r),),
        part_v, part_i, values, ids, n_rows, vocab, width_split, k, splits,
        BLOCK_R=block_r, WIDTH=width, PAD=PAD_ID, num_warps=4 if width <= 1024 else 8)
    return values, ids
