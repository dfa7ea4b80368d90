"""Logits at a few given vocab ids per token: one row's K dot products, on the GPU.

The stage contract's ``logits_at`` (ops/stages.py): z [N, K] fp32 = (hidden @ weight.T)[n, id]
* inv_t[n], 0 where the id is -1 (another vocab shard). One program owns one token row and
BLOCK_I of its ids: it walks the hidden size in BLOCK_H chunks, loading the row's chunk once
and the ids' weight-row chunks in the input dtype, and accumulates the products in fp32.
The weight rows are read once per (token, id) in their dtype, where the torch path gathers
them into an fp32 copy first (three times the bytes of 16-bit rows, and a bmm over it).
Both operands are widened to fp32 on load, so any pair of dtypes the ops take (one dtype,
or one 16-bit and one fp32) gives fp32 products; ``LOGITS_DTYPE`` rounds each sum as the
other stages do (``_tiles.round_logits``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._tiles import round_logits
from .launch import (cdiv, check_device, interpreting, inv_t_args, launch, logits_rounding,
                     next_power_of_2, rowmajor)

# ids per program and hidden columns per step ([32, 256] fp32 products: 64 registers a
# thread at 4 warps).
GATHER_BLOCK_IDS = 32
GATHER_BLOCK_H = 256


@triton.jit
def gather_dot_kernel(h_ptr, w_ptr, ids_ptr, inv_t_ptr, out_ptr, H, K, stride_h, stride_w,
                      inv_t, ROW_INV_T: tl.constexpr, BLOCK_I: tl.constexpr,
                      BLOCK_H: tl.constexpr, LOGITS_DTYPE: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    valid = j < K
    ids = tl.load(ids_ptr + row.to(tl.int64) * K + j, mask=valid, other=-1)
    here = valid & (ids >= 0)
    w_rows = w_ptr + tl.where(here, ids, 0).to(tl.int64)[:, None] * stride_w
    h_row = h_ptr + row.to(tl.int64) * stride_h
    acc = tl.zeros([BLOCK_I], tl.float32)
    for h0 in range(0, H, BLOCK_H):
        cols = h0 + tl.arange(0, BLOCK_H)
        in_h = cols < H
        h = tl.load(h_row + cols, mask=in_h, other=0.0).to(tl.float32)
        w = tl.load(w_rows + cols[None, :], mask=here[:, None] & in_h[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(w * h[None, :], axis=1)
    acc = round_logits(acc, LOGITS_DTYPE)
    if ROW_INV_T:
        inv_t = tl.load(inv_t_ptr + row)
    tl.store(out_ptr + row.to(tl.int64) * K + j, tl.where(here, acc * inv_t, 0.0), mask=valid)


def logits_at(hidden: torch.Tensor, weight: torch.Tensor, local_ids: torch.Tensor,
              inv_temperature, *, logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The stage contract's logits_at on this kernel."""
    check_device(hidden, weight, local_ids)
    rounding = logits_rounding(logits_dtype)
    n, k = local_ids.shape
    out = torch.empty(n, k, dtype=torch.float32, device=hidden.device)  # all written
    if n == 0 or k == 0:
        return out
    hidden, weight = rowmajor(hidden), rowmajor(weight)
    ids = local_ids.contiguous()
    inv_t_rows, inv_t = inv_t_args(inv_temperature)
    block_i = max(2, min(GATHER_BLOCK_IDS, next_power_of_2(k)))
    grid = (n, cdiv(k, block_i))
    launch(gather_dot_kernel, grid, hidden, weight, ids,
           out if inv_t_rows is None else inv_t_rows, out, hidden.shape[1], k, hidden.stride(0),
           weight.stride(0), inv_t, ROW_INV_T=inv_t_rows is not None, BLOCK_I=block_i,
           BLOCK_H=16 if interpreting() else GATHER_BLOCK_H, LOGITS_DTYPE=rounding,
           num_warps=4)
    return out
