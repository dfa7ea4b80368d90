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

``logits_at_ids`` (the ops' path): the same gather from global ids, sharded in the kernel,
with check_ids.py's check in the same launch (its programs after the gather's).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._record import record_buffer
from ._tiles import round_logits
from .check_ids import CHECK_BLOCK_ROWS, check_block_ids, check_rows
from .launch import (cdiv, check_device, interpreting, inv_t_args, launch, logits_rounding,
                     next_power_of_2, rowmajor)

# ids per program and hidden columns per step ([32, 256] fp32 products: 64 registers a
# thread at 4 warps).
GATHER_BLOCK_IDS = 32
GATHER_BLOCK_H = 256


@triton.jit
def gather_row(h_ptr, w_ptr, ids_ptr, inv_t_ptr, out_ptr, row, j_block, H, K, stride_h,
               stride_w, inv_t, vocab_start, local_vocab, GLOBAL_IDS: tl.constexpr,
               ROW_INV_T: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr,
               LOGITS_DTYPE: tl.constexpr):
    """Row ``row``'s z at its ids [j_block * BLOCK_I, +BLOCK_I). The ids: this shard's (-1:
    none), or with ``GLOBAL_IDS`` global ones, sharded here as check_ids shards them (an id
    outside [0, V) lies in no shard: it reads nothing, as its -1 would)."""
    j = j_block * BLOCK_I + tl.arange(0, BLOCK_I)
    valid = j < K
    ids = tl.load(ids_ptr + row.to(tl.int64) * K + j, mask=valid, other=-1)
    if GLOBAL_IDS:
        ids = ids.to(tl.int64) - vocab_start
        here = valid & (ids >= 0) & (ids < local_vocab)
    else:
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


@triton.jit
def gather_dot_kernel(h_ptr, w_ptr, ids_ptr, inv_t_ptr, out_ptr, H, K, stride_h, stride_w,
                      inv_t, ROW_INV_T: tl.constexpr, BLOCK_I: tl.constexpr,
                      BLOCK_H: tl.constexpr, LOGITS_DTYPE: tl.constexpr):
    gather_row(h_ptr, w_ptr, ids_ptr, inv_t_ptr, out_ptr, tl.program_id(0), tl.program_id(1),
               H, K, stride_h, stride_w, inv_t, 0, 0, False, ROW_INV_T, BLOCK_I, BLOCK_H,
               LOGITS_DTYPE)


@triton.jit
def check_gather_kernel(h_ptr, w_ptr, ids_ptr, inv_t_ptr, out_ptr, local_ptr, bad_rows_ptr,
                        rec_ptr, N, H, K, stride_h, stride_w, inv_t, vocab_start, local_vocab,
                        vocab_size, gather_programs, ROW_INV_T: tl.constexpr,
                        BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr,
                        LOGITS_DTYPE: tl.constexpr, CHECK_ROWS: tl.constexpr,
                        CHECK_IDS: tl.constexpr):
    """logits_at_ids in one launch: programs [0, gather_programs) gather (row-major over
    (row, block of ids)) from the global ids, the rest check them (check_ids.check_rows:
    local ids, bad rows, the record). Neither reads what the other writes."""
    pid = tl.program_id(0)
    if pid < gather_programs:
        j_blocks = tl.cdiv(K, BLOCK_I)
        gather_row(h_ptr, w_ptr, ids_ptr, inv_t_ptr, out_ptr, pid // j_blocks, pid % j_blocks,
                   H, K, stride_h, stride_w, inv_t, vocab_start, local_vocab, True, ROW_INV_T,
                   BLOCK_I, BLOCK_H, LOGITS_DTYPE)
    else:
        check_rows(ids_ptr, local_ptr, bad_rows_ptr, rec_ptr, pid - gather_programs, N, K,
                   vocab_start, local_vocab, vocab_size, CHECK_ROWS, CHECK_IDS)


def _gather_blocks(k: int) -> tuple[int, int]:
    """gather_row's (BLOCK_I, BLOCK_H) for K ids a row (the interpreter: narrow steps)."""
    return (max(2, min(GATHER_BLOCK_IDS, next_power_of_2(k))),
            16 if interpreting() else GATHER_BLOCK_H)


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
    block_i, block_h = _gather_blocks(k)
    grid = (n, cdiv(k, block_i))
    launch(gather_dot_kernel, grid, hidden, weight, ids,
           out if inv_t_rows is None else inv_t_rows, out, hidden.shape[1], k, hidden.stride(0),
           weight.stride(0), inv_t, ROW_INV_T=inv_t_rows is not None, BLOCK_I=block_i,
           BLOCK_H=block_h, LOGITS_DTYPE=rounding,
           num_warps=4)
    return out


def logits_at_ids(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor,
                  vocab_start: int, local_vocab: int, vocab_size: int, inv_temperature, *,
                  logits_dtype: torch.dtype | None = None, record_alloc=None):
    """The stage contract's logits_at_ids: check_ids' and logits_at's outputs, ``(z,
    local_ids, bad_rows, record)``, in one launch (check_gather_kernel), where the two took
    one each: a launch is ~25-50 us of a small call's host time (docs/BENCHMARKS.md)."""
    check_device(hidden, weight, ids)
    # the gather's programs take an id in this shard for one in [0, vocab_size): it lies there
    assert 0 <= vocab_start and vocab_start + local_vocab <= vocab_size, \
        (vocab_start, local_vocab, vocab_size)
    rounding = logits_rounding(logits_dtype)
    n, k = ids.shape
    dev = hidden.device
    out = torch.empty(n, k, dtype=torch.float32, device=dev)  # all written
    local = torch.empty(n, k, dtype=torch.int64, device=dev)
    bad_rows = torch.empty(n, dtype=torch.int8, device=dev)
    check_programs = cdiv(n, CHECK_BLOCK_ROWS)
    if n and k:
        hidden, weight = rowmajor(hidden), rowmajor(weight)
        inv_t_rows, inv_t = inv_t_args(inv_temperature)
    # lent last: nothing but the launch between its lending and the op's queueing it
    rec = record_buffer(check_programs, dev, record_alloc)
    if n and not k:  # no ids: no bad row
        bad_rows.zero_()
        rec.zero_()
    elif n:
        block_i, block_h = _gather_blocks(k)
        gather_programs = n * cdiv(k, block_i)
        launch(check_gather_kernel, (gather_programs + check_programs,),
               hidden, weight, ids.contiguous(), out if inv_t_rows is None else inv_t_rows, out,
               local, bad_rows, rec, n, hidden.shape[1], k, hidden.stride(0), weight.stride(0),
               inv_t, vocab_start, local_vocab, vocab_size, gather_programs,
               ROW_INV_T=inv_t_rows is not None, BLOCK_I=block_i,
               BLOCK_H=block_h, LOGITS_DTYPE=rounding, CHECK_ROWS=CHECK_BLOCK_ROWS,
               CHECK_IDS=check_block_ids(k), num_warps=4)
    return out, local, bad_rows.view(torch.bool), rec
