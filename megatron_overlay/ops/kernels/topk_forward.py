"""Top-k forward: the log-prob forward statistics plus a running top-k, in one pass.

The same work items as logprob_forward.py (a tile of BLOCK_M tokens x a range of vocab
tiles), on the same 128 x 256 tile: each logits tile is folded into the four statistics
(``_fold_max``, shared) and then offered to a per-row top-k kept in registers, [BLOCK_M,
KP] values and ids (KP: k rounded up to a power of two; slots >= k hold +inf and are never
evicted or stored).

The top-k works on the raw accumulator (logits before the temperature): inv_t > 0 keeps
the order within a row, so nothing of the tile's size is materialized beside ``acc``,
and the values are scaled by inv_t once, at the end (the same fp32 product as
``acc * inv_t``). (Two raw logits that differ but round to the same z are selected by
the raw logit, where the k-th place falls between them; equal raw logits go to the lower
id. The host orders the output by z, then id.)

Per tile, one fused reduction (``tl.max(..., return_indices=True)``, leftmost of equal
maxima) gives each row's maximum and its lowest column; the fold reuses the maximum.
k = 1: that pair replaces the running one if strictly larger. k > 1: the maximum replaces
the slot holding the row's current k-th value ``thr`` (the highest id among equal minima)
if it beats it; only if some row had two or more logits above ``thr`` (one count a tile)
do rounds follow: each row's next candidate is the largest (value, lowest column)
strictly below the one just taken in (value desc, column asc) order and strictly above
the new ``thr`` (one fused reduction a round, no mask tile kept), until no row has one.
Strict comparisons keep ties with the lower id: tiles come in ascending vocab order
within a work item. Rounds per tile: at most k; the first tiles of a split fill the list.

Each item writes its statistics to ``part`` and its (unordered) top-k to ``part_v`` /
``part_i``; the host orders and merges the splits (topk_merge.order_candidates).
"""

import triton
import triton.language as tl

from ._tiles import dot_nt, grouped_ids, load_tile
from .logprob_forward import _fold_max, _label_logit, _pad_tile


@triton.jit
def _take(best, col, has, thr, run_v, run_i):
    """Put (best, col) into the slot holding ``thr`` (highest id among equal minima) of
    the rows in ``has``; return the new lists and their new minima."""
    at_min = run_v == thr[:, None]
    evict = tl.max(tl.where(at_min, run_i, -1), axis=1)
    hit = at_min & (run_i == evict[:, None]) & has[:, None]
    run_v = tl.where(hit, best[:, None], run_v)
    run_i = tl.where(hit, col[:, None], run_i)
    return run_v, run_i, tl.min(run_v, axis=1)


@triton.jit
def _columns(BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, OPAQUE: tl.constexpr):
    """[BLOCK_M, BLOCK_V] column positions 0..BLOCK_V-1. ``OPAQUE`` (compiled kernels):
    through an inline-asm copy the compiler cannot hoist, so the positions are rebuilt in
    each round instead of held in ~64 registers across the whole vocab loop beside the
    accumulator (which made ptxas spill: 268 -> 16 bytes at k = 8). The interpreter runs
    no inline asm."""
    idx = tl.arange(0, BLOCK_V)[None, :] + tl.zeros([BLOCK_M, BLOCK_V], tl.int32)
    if OPAQUE:
        idx = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [idx], dtype=tl.int32,
                                        is_pure=False, pack=1)
    return idx


@triton.jit
def _next_candidate(acc, best, col, thr, v0, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr,
                    OPAQUE: tl.constexpr):
    """Each row's largest (value, lowest column) strictly below (best, col) in (value desc,
    column asc) order and strictly above ``thr``; ``has``: whether there is one."""
    pos = col - v0
    idx = _columns(BLOCK_M, BLOCK_V, OPAQUE)
    below = (acc < best[:, None]) | ((acc == best[:, None]) & (idx > pos[:, None]))
    nxt = tl.where(below & (acc > thr[:, None]), acc, float("-inf"))
    best, pos = tl.max(nxt, axis=1, return_indices=True, return_indices_tie_break_left=True)
    return best, v0 + pos, best > thr


@triton.jit
def _offer_tile(acc, acc_max, arg_max, v0, run_v, run_i, BLOCK_M: tl.constexpr,
                BLOCK_V: tl.constexpr, KP: tl.constexpr, OPAQUE: tl.constexpr):
    """Offer one padded raw tile to the running top-k (see the module docstring)."""
    best = acc_max
    col = v0 + arg_max
    if KP == 1:  # top-1: a running argmax
        better = (best > tl.max(run_v, axis=1))[:, None]
        run_v = tl.where(better, best[:, None], run_v)
        run_i = tl.where(better, col[:, None], run_i)
    else:
        thr = tl.min(run_v, axis=1)
        has = best > thr
        # candidates per row: the row maximum is taken without a scan; the rounds below
        # run only in tiles where some row has a second one (few, past the first tiles)
        more = tl.max(tl.sum((acc > thr[:, None]).to(tl.int32), axis=1), axis=0) > 1
        run_v, run_i, thr = _take(best, col, has, thr, run_v, run_i)
        while more:
            best, col, has = _next_candidate(acc, best, col, thr, v0, BLOCK_M, BLOCK_V, OPAQUE)
            run_v, run_i, thr = _take(best, col, has, thr, run_v, run_i)
            more = tl.max(has.to(tl.int32), axis=0) > 0
    return run_v, run_i


@triton.jit
def topk_stats_kernel(
    h_src, w_src, labels_ptr, part_ptr, part_v_ptr, part_i_ptr, inv_t_ptr,
    N, V, H, K, stride_h, stride_w, inv_t,
    num_splits, tiles_per_split, group_m,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, KP: tl.constexpr,
    WITH_ENTROPY: tl.constexpr, USE_TMA: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr, ROW_INV_T: tl.constexpr, OPAQUE_COLUMNS: tl.constexpr,
):
    pid = tl.program_id(0)
    num_m = tl.cdiv(N, BLOCK_M)
    pid_m, split = grouped_ids(pid, num_m, num_splits, group_m)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    labels = tl.load(labels_ptr + rows, mask=rows < N, other=-1).to(tl.int32)
    inv_t_col = inv_t
    if ROW_INV_T:
        inv_t = tl.load(inv_t_ptr + rows, mask=rows < N, other=1.0)
        inv_t_col = inv_t[:, None]
    v_begin = split * tiles_per_split
    v_end = tl.minimum(v_begin + tiles_per_split, tl.cdiv(V, BLOCK_V))
    k_tiles = tl.cdiv(H, BLOCK_K)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_i = tl.zeros([BLOCK_M], tl.float32)
    t_i = tl.zeros([BLOCK_M], tl.float32)
    zl_i = tl.zeros([BLOCK_M], tl.float32)
    slots = tl.arange(0, KP)
    # slots >= K: +inf, never the minimum; placeholder ids >= V mark unfilled slots
    run_v = tl.where(slots[None, :] < K, float("-inf"), float("inf")) \
        + tl.zeros([BLOCK_M, KP], tl.float32)
    run_i = (V + slots[None, :]) + tl.zeros([BLOCK_M, KP], tl.int32)

    for vt in range(v_begin, v_end):
        v0 = vt * BLOCK_V
        acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
        for kk in range(0, k_tiles):
            a = load_tile(h_src, m0, kk * BLOCK_K, N, H, stride_h, BLOCK_M, BLOCK_K, USE_TMA)
            b = load_tile(w_src, v0, kk * BLOCK_K, V, H, stride_w, BLOCK_V, BLOCK_K, USE_TMA)
            acc = dot_nt(a, b, acc, DOT_PRECISION, UPCAST_DOT)
        zl_i += _label_logit(acc, v0, labels, inv_t, BLOCK_V)
        acc = _pad_tile(acc, v0, V, inv_t_col, BLOCK_V)
        acc_max, arg_max = tl.max(acc, axis=1, return_indices=True,
                                  return_indices_tie_break_left=True)
        run_v, run_i = _offer_tile(acc, acc_max, arg_max, v0, run_v, run_i, BLOCK_M, BLOCK_V,
                                   KP, OPAQUE_COLUMNS)
        m_i, s_i, t_i = _fold_max(acc, acc_max, inv_t, inv_t_col, m_i, s_i, t_i, WITH_ENTROPY)

    keep = rows < N
    out = part_ptr + (split.to(tl.int64) * N + rows) * 4
    tl.store(out + 0, m_i, mask=keep)
    tl.store(out + 1, s_i, mask=keep)
    tl.store(out + 2, t_i, mask=keep)
    tl.store(out + 3, zl_i, mask=keep)
    # raw -> z; padded columns (ids >= V: a split with fewer than k real columns) -> -inf
    run_v = tl.where(run_i < V, run_v * inv_t_col, float("-inf"))
    top = (split.to(tl.int64) * N + rows[:, None]) * K + slots[None, :]
    top_mask = keep[:, None] & (slots[None, :] < K)
    tl.store(part_v_ptr + top, run_v, mask=top_mask)
    tl.store(part_i_ptr + top, run_i, mask=top_mask)
