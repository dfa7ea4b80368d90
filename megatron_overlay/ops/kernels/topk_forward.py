"""Top-k forward: the log-prob forward statistics plus a running top-k, in one pass.

The same work items as logprob_forward.py (a tile of BLOCK_M tokens x a range of vocab
tiles): each logits tile is folded into the four statistics (``_fold_tile``, shared) and
then offered to a per-row top-k kept in registers, [BLOCK_M, KP] values and ids (KP: k
rounded up to a power of two; slots >= k hold +inf and are never evicted or stored).

Insertion, per tile: the candidates are the tile's z strictly above the row's current
k-th value (``thr``). While any row has one, each row takes its largest candidate (the
lowest column among equal ones) and, if it beats ``thr``, it replaces the slot holding
``thr`` (the highest id among equal minima). Strict comparisons keep ties with the lower
id: tiles come in ascending vocab order within a work item. The loop runs
min(k, most candidates in any row) times; after the first few tiles most rows have none
above their k-th value, so the usual cost is a compare and a row count per logit.

Each item writes its statistics to ``part`` and its (unordered) top-k to ``part_v`` /
``part_i``; the host orders and merges the splits (topk_merge.order_candidates).
"""

import triton
import triton.language as tl

from ._tiles import dot_nt, grouped_ids, load_tile
from .logprob_forward import _fold_tile

BIG = tl.constexpr(2147483647)


@triton.jit
def _offer_tile(acc, v0, V, inv_t_col, run_v, run_i, K, BLOCK_V: tl.constexpr,
                KP: tl.constexpr):
    cols = v0 + tl.arange(0, BLOCK_V)
    z = tl.where(cols[None, :] < V, acc * inv_t_col, float("-inf"))
    cols2d = cols[None, :] + tl.zeros_like(z).to(tl.int32)
    if KP == 1:  # top-1: a running argmax, no insertion loop
        best = tl.max(z, axis=1)
        col = tl.min(tl.where(z == best[:, None], cols2d, BIG), axis=1)
        better = (best > tl.max(run_v, axis=1))[:, None]
        run_v = tl.where(better, best[:, None], run_v)
        run_i = tl.where(better, col[:, None], run_i)
    else:
        thr = tl.min(run_v, axis=1)
        cand = z > thr[:, None]
        n_iter = tl.minimum(tl.max(tl.sum(cand.to(tl.int32), axis=1), axis=0), K)
        for _ in range(n_iter):
            best = tl.max(tl.where(cand, z, float("-inf")), axis=1)
            col = tl.min(tl.where(cand & (z == best[:, None]), cols2d, BIG), axis=1)
            has = best > thr
            at_min = run_v == thr[:, None]
            evict = tl.max(tl.where(at_min, run_i, -1), axis=1)
            hit = at_min & (run_i == evict[:, None]) & has[:, None]
            run_v = tl.where(hit, best[:, None], run_v)
            run_i = tl.where(hit, col[:, None], run_i)
            thr = tl.min(run_v, axis=1)
            cand = cand & (cols2d != col[:, None]) & (z > thr[:, None])
    return run_v, run_i


@triton.jit
def topk_stats_kernel(
    h_src, w_src, labels_ptr, part_ptr, part_v_ptr, part_i_ptr, inv_t_ptr,
    N, V, H, K, stride_h, stride_w, inv_t,
    num_splits, tiles_per_split, group_m,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, KP: tl.constexpr,
    WITH_ENTROPY: tl.constexpr, USE_TMA: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr, ROW_INV_T: tl.constexpr,
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
        run_v, run_i = _offer_tile(acc, v0, V, inv_t_col, run_v, run_i, K, BLOCK_V, KP)
        m_i, s_i, t_i, zl_i = _fold_tile(acc, v0, labels, V, inv_t, inv_t_col,
                                          m_i, s_i, t_i, zl_i, BLOCK_V, WITH_ENTROPY)

    keep = rows < N
    out = part_ptr + (split.to(tl.int64) * N + rows) * 4
    tl.store(out + 0, m_i, mask=keep)
    tl.store(out + 1, s_i, mask=keep)
    tl.store(out + 2, t_i, mask=keep)
    tl.store(out + 3, zl_i, mask=keep)
    top = (split.to(tl.int64) * N + rows[:, None]) * K + slots[None, :]
    top_mask = keep[:, None] & (slots[None, :] < K)
    tl.store(part_v_ptr + top, run_v, mask=top_mask)
    tl.store(part_i_ptr + top, run_i, mask=top_mask)
