"""Merge the forward's per-split statistics [S, N, 4] into per-token ones [N, 4].

One program owns BLOCK rows and folds the S splits in split order, so each row's result
depends on its own values only (batch invariance: a reduction kernel of torch's may
split the S axis differently for different N). As the stages' finalize merges TP
shards: m = max over splits, s = sum s_i e^(m_i - m), t = sum (t_i + s_i (m_i - m))
e^(m_i - m) (each split's t is relative to its own max), z[label] = sum z_i.
Shared by the log-prob and top-k forward stages.
"""

import torch
import triton
import triton.language as tl

from .launch import cdiv, launch

MERGE_BLOCK = 256  # token rows per program


# Parts a step of fold_parts: their loads are independent of the step's arithmetic, so the
# compiler issues them together and a step waits on one memory latency, not FOLD_UNROLL
# (the sum stays in part order: the same bits as a loop over one part a step).
FOLD_UNROLL = tl.constexpr(8)


@triton.jit
def fold_parts(part_ptr, rows, keep, N, num_parts, WITH_ENTROPY: tl.constexpr,
               BLOCK: tl.constexpr):
    """(m, s, t, z[label]) of ``rows`` from [num_parts, N, 4] statistics, folded in part
    order (vocab splits here; TP shards in finalize_stats.py). A part past num_parts (the
    last step's) changes nothing: its terms are selected away, not added as zeros."""
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for s0 in range(0, num_parts, FOLD_UNROLL):
        for j in tl.static_range(FOLD_UNROLL):
            part = s0 + j < num_parts
            m_s = tl.load(part_ptr + ((s0 + j) * N + rows).to(tl.int64) * 4, mask=keep & part,
                          other=0.0)
            m = tl.where(part, tl.maximum(m, m_s), m)
    sum_s = tl.zeros([BLOCK], tl.float32)
    sum_t = tl.zeros([BLOCK], tl.float32)
    z_label = tl.zeros([BLOCK], tl.float32)
    for s0 in range(0, num_parts, FOLD_UNROLL):
        for j in tl.static_range(FOLD_UNROLL):
            part = s0 + j < num_parts
            src = part_ptr + ((s0 + j) * N + rows).to(tl.int64) * 4
            ok = keep & part
            m_s = tl.load(src + 0, mask=ok, other=0.0)
            s_s = tl.load(src + 1, mask=ok, other=0.0)
            weight = tl.exp(m_s - m)  # every part has >= 1 column: m_s is finite
            sum_s = tl.where(part, sum_s + s_s * weight, sum_s)
            if WITH_ENTROPY:
                t_s = tl.load(src + 2, mask=ok, other=0.0)
                sum_t = tl.where(part, sum_t + (t_s + s_s * (m_s - m)) * weight, sum_t)
            z_label = tl.where(part, z_label + tl.load(src + 3, mask=ok, other=0.0), z_label)
    return m, sum_s, sum_t, z_label


@triton.jit
def merge_splits_kernel(part_ptr, stats_ptr, N, num_splits,
                        WITH_ENTROPY: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = rows < N
    m, sum_s, sum_t, z_label = fold_parts(part_ptr, rows, keep, N, num_splits, WITH_ENTROPY,
                                          BLOCK)
    dst = stats_ptr + rows.to(tl.int64) * 4
    tl.store(dst + 0, m, mask=keep)
    tl.store(dst + 1, sum_s, mask=keep)
    tl.store(dst + 2, sum_t, mask=keep)
    tl.store(dst + 3, z_label, mask=keep)


def merge_splits(part: torch.Tensor, stats: torch.Tensor, with_entropy: bool) -> None:
    """[S, rows, 4] per-split statistics -> ``stats`` [rows, 4]."""
    n_rows = stats.shape[0]
    launch(merge_splits_kernel, (cdiv(n_rows, MERGE_BLOCK),),
        part, stats, n_rows, part.shape[0], WITH_ENTROPY=with_entropy, BLOCK=MERGE_BLOCK)
