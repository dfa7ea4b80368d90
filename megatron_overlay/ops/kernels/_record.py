"""The label check's record, one row a program (ops/label_check.py reads the rows): shared
by the kernels that check ids (finalize_stats.py for labels, and through its
``finalize_rows`` the top-k's last kernels, merge_topk.py and merge_runs.py; check_ids.py
for given ids)."""

import torch
import triton
import triton.language as tl

I64_MAX = tl.constexpr(9223372036854775807)


@triton.jit
def store_record(rec_ptr, pid, count, low, high, first):
    """Row ``pid``: the bad ids' count, smallest and largest id, and first position,
    reduced over the program's partials (vectors of one shape: per row, or per id)."""
    rec = rec_ptr + pid * 4
    tl.store(rec + 0, tl.sum(count, axis=0))
    tl.store(rec + 1, tl.min(low, axis=0))
    tl.store(rec + 2, tl.max(high, axis=0))
    tl.store(rec + 3, tl.min(first, axis=0))


def record_buffer(programs: int, device: torch.device, record_alloc=None) -> torch.Tensor:
    """Where the kernel writes its record, int64 [programs, 4]: ``record_alloc``'s buffer
    when given (the stage contract's, ops/stages.py), else device memory."""
    if record_alloc is not None and programs:
        return record_alloc(programs, device)
    return torch.empty(programs, 4, dtype=torch.int64, device=device)
