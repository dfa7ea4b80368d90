"""Device helpers of the two forward kernels (logprob_forward.py, topk_forward.py).

Both kernels walk the same work items (a tile of BLOCK_M tokens x a range of vocab tiles,
a "split") and keep the same four running per-token values in registers, folded one
logits tile at a time: a = the largest raw logit, s = sum exp(z - m), t = sum exp(z - m)
(z - m) (relative to m = max z = a inv_t, as the stage contract has it; fold_max says why
a and not m), zl = z[label]; each item writes (m, s, t, zl) to ``part[split]`` ([splits,
N, 4] fp32) for the host's merge (merge_splits.py), m formed there (store_stats).
"""

import triton
import triton.language as tl

from ._tiles import grouped_ids

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
# Stands in for -inf in the padded columns of the last vocab tile (divided by inv_t, so
# that z stays finite): exp of it is 0 and, unlike -inf, 0 * it is 0, so t stays finite.
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit
def work_item(labels_ptr, inv_t_ptr, inv_t, N, V, num_splits, tiles_per_split, group_m,
              BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, ROW_INV_T: tl.constexpr,
              HAS_LABELS: tl.constexpr):
    """This program's work item, in grouped order: (split, first token row m0, the token
    rows, their labels, inv_t, inv_t_col, first vocab tile, end vocab tile).

    ``ROW_INV_T``: per-row inverse temperatures at ``inv_t_ptr`` [N], returned as
    [BLOCK_M] (``inv_t``, for row sums) and [BLOCK_M, 1] (``inv_t_col``, for tiles); else
    the scalar ``inv_t`` twice (``inv_t_ptr`` unused).
    """
    pid = tl.program_id(0)
    num_m = tl.cdiv(N, BLOCK_M)
    pid_m, split = grouped_ids(pid, num_m, num_splits, group_m)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    labels = tl.full([BLOCK_M], -1, tl.int32)  # no labels: ``labels_ptr`` unused
    if HAS_LABELS:
        labels = tl.load(labels_ptr + rows, mask=rows < N, other=-1).to(tl.int32)
    inv_t_col = inv_t
    if ROW_INV_T:
        inv_t = tl.load(inv_t_ptr + rows, mask=rows < N, other=1.0)
        inv_t_col = inv_t[:, None]
    v_begin = split * tiles_per_split
    v_end = tl.minimum(v_begin + tiles_per_split, tl.cdiv(V, BLOCK_V))
    return split, m0, rows, labels, inv_t, inv_t_col, v_begin, v_end


@triton.jit
def empty_stats(BLOCK_M: tl.constexpr):
    """(a, s, t, zl) of no logits yet (a: the largest raw logit)."""
    a_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_i = tl.zeros([BLOCK_M], tl.float32)
    t_i = tl.zeros([BLOCK_M], tl.float32)
    zl_i = tl.zeros([BLOCK_M], tl.float32)
    return a_i, s_i, t_i, zl_i


@triton.jit
def store_stats(part_ptr, split, rows, N, inv_t, a_i, s_i, t_i, zl_i):
    """The item's (m, s, t, zl) to part[split, rows], m = a inv_t: max(logit) inv_t is
    max(logit inv_t) bit for bit (inv_t > 0; rounding keeps order)."""
    out = part_ptr + (split.to(tl.int64) * N + rows) * 4
    keep = rows < N
    tl.store(out + 0, a_i * inv_t, mask=keep)
    tl.store(out + 1, s_i, mask=keep)
    tl.store(out + 2, t_i, mask=keep)
    tl.store(out + 3, zl_i, mask=keep)


@triton.jit
def label_logit(acc, v0, labels, inv_t, BLOCK_V: tl.constexpr):
    """z[label] of each row within this tile (0 where the label is elsewhere): at most one
    column of one tile matches; inv_t applied to the row sum. In every tile: a branch that
    took the select only in tiles holding some row's label (about one in five) gave the
    same bits but made the log-prob forward 1.08x / 1.11x slower at 16384 / 32768 tokens
    on an H100 (1.03x at 8192, within the rounds' spread; the branch in the vocab loop;
    docs/BENCHMARKS.md, pass 14)."""
    cols = v0 + tl.arange(0, BLOCK_V)
    return tl.sum(tl.where(cols[None, :] == labels[:, None], acc, 0.0), axis=1) * inv_t


@triton.jit
def pad_tile(acc, v0, V, inv_t_col, BLOCK_V: tl.constexpr):
    """Only the last vocab tile has padded (zero-filled) columns: NEG_BIG there."""
    if v0 + BLOCK_V > V:
        cols = v0 + tl.arange(0, BLOCK_V)
        acc = tl.where(cols[None, :] < V, acc, NEG_BIG / tl.maximum(inv_t_col, 1.0))
    return acc


@triton.jit
def fold_max(acc, acc_max, inv_t, inv_t_col, a_i, s_i, t_i, WITH_ENTROPY: tl.constexpr):
    """The fold of a padded tile of raw logits ``acc`` whose rows' maxima ``acc_max`` are
    known, into the running (a, s, t): a the largest raw logit so far, s and t relative to
    m = a inv_t. ``inv_t`` / ``inv_t_col`` as work_item's (> 0, or NaN: NaN rows).

    Work in log2 units: u = (logit - a) inv_t log2(e), so exp(z - m) = exp2(u) and t =
    ln(2) sum exp2(u) u. The subtraction comes first, in raw units, so that the maximum's
    own u is exactly 0 at every temperature. Formed as logit * (inv_t log2 e) - m log2 e
    (one FMA, with m rounded apart; before pass 17) the maximum's u was off by ~|z| 1e-7:
    2e-3 nats on the argmax's log-prob at T = 1e-3, and from |z| ~ 1e9 (T = 1e-8 at
    logits ~20) exp2 of it underflowed and the row was NaN (docs/BENCHMARKS.md, passes 16
    and 17; the one more FP op a logit cost no measurable time on an H100: after / before
    0.978-1.022 over 13 forward timings).
    """
    a_new = tl.maximum(a_i, acc_max)
    alpha = tl.exp2((a_i - a_new) * (inv_t * LOG2E))  # a_i = -inf (no logits yet): 0
    u = (acc - a_new[:, None]) * (inv_t_col * LOG2E)
    p = tl.exp2(u)
    if WITH_ENTROPY:
        # move t's reference point from m to m_new: t' = alpha (t + s (m - m_new))
        moved = tl.where(s_i > 0, s_i * ((a_i - a_new) * inv_t), 0.0)
        t_i = alpha * (t_i + moved) + tl.sum(p * u, axis=1) * LN2
    s_i = s_i * alpha + tl.sum(p, axis=1)
    return a_new, s_i, t_i
