"""Vocab ids given per token, checked and sharded in one launch: the stage contract's
``check_ids``.

For ``ids`` [N, K] global vocab ids (linear_logprobs_at's ``token_ids``) one program owns
BLOCK_ROWS rows and, BLOCK_IDS ids at a time:

1. bad = id outside [0, vocab_size); a row is bad if any of its ids is;
2. the index into this vocab shard, [vocab_start, vocab_start + local_vocab): id -
   vocab_start there, -1 elsewhere and for a bad id (which lies in no shard), so that the
   gather and the backward's sparse terms read nothing for it;
3. one row of the label check's record (count, smallest and largest bad id, first bad
   position in the flattened ids; ops/label_check.py reduces the rows on the host when it
   reads them), as finalize_stats.py writes for labels.

Where the op ran ten element-wise torch launches and reductions (the range mask, the
record's four, the row mask, the clamp, the shard's three), each costing the host
~10-25 us to enqueue (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._record import I64_MAX, record_buffer, store_record
from .launch import cdiv, check_device, launch, next_power_of_2

CHECK_BLOCK_ROWS = 32
CHECK_BLOCK_IDS = 64


@triton.jit
def check_rows(ids_ptr, local_ptr, bad_rows_ptr, rec_ptr, pid, N, K, vocab_start, local_vocab,
               vocab_size, BLOCK_ROWS: tl.constexpr, BLOCK_IDS: tl.constexpr):
    """Rows [pid * BLOCK_ROWS, +BLOCK_ROWS): their local ids, bad flags and record row
    ``pid`` (check_ids_kernel's program; gather_dot.check_gather_kernel's check programs)."""
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_rows = rows < N
    big = tl.full([BLOCK_ROWS, BLOCK_IDS], I64_MAX, tl.int64)
    row_bad = tl.zeros([BLOCK_ROWS], tl.int32)
    count = tl.zeros([BLOCK_ROWS], tl.int64)
    low = tl.full([BLOCK_ROWS], I64_MAX, tl.int64)
    high = tl.full([BLOCK_ROWS], -I64_MAX, tl.int64)
    first = tl.full([BLOCK_ROWS], I64_MAX, tl.int64)
    for j0 in range(0, K, BLOCK_IDS):
        cols = j0 + tl.arange(0, BLOCK_IDS)
        keep = in_rows[:, None] & (cols[None, :] < K)
        pos = rows.to(tl.int64)[:, None] * K + cols[None, :]
        ids = tl.load(ids_ptr + pos, mask=keep, other=0).to(tl.int64)
        bad = keep & ((ids < 0) | (ids >= vocab_size))
        local = ids - vocab_start
        here = keep & ~bad & (local >= 0) & (local < local_vocab)
        tl.store(local_ptr + pos, tl.where(here, local, -1), mask=keep)
        row_bad = tl.maximum(row_bad, tl.max(bad.to(tl.int32), axis=1))
        count += tl.sum(bad.to(tl.int64), axis=1)
        low = tl.minimum(low, tl.min(tl.where(bad, ids, big), axis=1))
        high = tl.maximum(high, tl.max(tl.where(bad, ids, -big), axis=1))
        first = tl.minimum(first, tl.min(tl.where(bad, pos, big), axis=1))
    tl.store(bad_rows_ptr + rows, row_bad.to(tl.int8), mask=in_rows)
    store_record(rec_ptr, pid, count, low, high, first)


@triton.jit
def check_ids_kernel(ids_ptr, local_ptr, bad_rows_ptr, rec_ptr, N, K, vocab_start,
                     local_vocab, vocab_size, BLOCK_ROWS: tl.constexpr,
                     BLOCK_IDS: tl.constexpr):
    check_rows(ids_ptr, local_ptr, bad_rows_ptr, rec_ptr, tl.program_id(0), N, K, vocab_start,
               local_vocab, vocab_size, BLOCK_ROWS, BLOCK_IDS)


def check_block_ids(k: int) -> int:
    """check_rows' BLOCK_IDS for K ids a row (its launchers': here and gather_dot.py)."""
    return min(CHECK_BLOCK_IDS, max(2, next_power_of_2(k)))


def check_ids(ids: torch.Tensor, vocab_start: int, local_vocab: int, vocab_size: int, *,
              record_alloc=None):
    """The contract's check_ids (ops/stages.py): (local_ids [N, K] int64, bad_rows [N] bool,
    record [cdiv(N, CHECK_BLOCK_ROWS), 4] int64, a row per program, in
    ``record_alloc(rows, device)`` when given)."""
    check_device(ids)
    n, k = ids.shape
    dev = ids.device
    programs = cdiv(n, CHECK_BLOCK_ROWS)
    local = torch.empty(n, k, dtype=torch.int64, device=dev)
    bad_rows = torch.empty(n, dtype=torch.int8, device=dev)
    rec = record_buffer(programs, dev, record_alloc)
    if n and not k:  # no ids: no bad row
        bad_rows.zero_()
        rec.zero_()
    elif n:
        launch(check_ids_kernel, (programs,),
            ids.contiguous(), local, bad_rows, rec, n, k, vocab_start, local_vocab, vocab_size,
            BLOCK_ROWS=CHECK_BLOCK_ROWS,
            BLOCK_IDS=check_block_ids(k))
    return local, bad_rows.view(torch.bool), rec
