"""Forward statistics: online log-sum-exp of z = (hidden @ W.T) * inv_t over vocab tiles.

(inv_t: one scalar, or one value per token row: ``ROW_INV_T``.)

One program owns one *work item*: a tile of BLOCK_M tokens and a contiguous range of
vocab tiles (a "split"). For each vocab tile it runs the K loop of the GEMM on the tensor
cores (fp32 accumulator), then folds the tile into four per-token running values kept in
registers: max z, sum exp(z - max), sum exp(z - max) (z - max) (entropy only), z[label]. The
logits tile never leaves registers. Each item writes its four values for its tokens to
``part[split]``; the host merges the splits (an O(splits x N) reduction).

Splitting the vocab is what makes the grid fill the GPU (tokens alone give N / BLOCK_M
items, too few at small N and unbalanced at large N); the split count is chosen on the
host to balance waves under a memory budget (autotune_configs.PARTIAL_STATS_BUDGET_BYTES).

Loop forms (``LOOP``), all the same math:
  0  nested: for each vocab tile, a pipelined K loop, then the epilogue.
  1  nested with ``tl.range(flatten=True)``: the compiler flattens the nest so the next
     tile's loads are in flight during the epilogue.
  2  hand-flattened: one loop over (vocab tile, k) with the epilogue under
     ``if k == last``; the same overlap, written out.
``WARP_SPEC`` asks Triton to warp-specialize the innermost loop (loads / MMA / epilogue
in separate warps); Triton 3.6 does not apply it to these loops on sm_90 (the TTGIR has no
warp_specialize op; its docs say Blackwell), so the default leaves it off. The nested form
with TMA loads and 3 pipeline stages already runs at cuBLAS's speed (docs/BENCHMARKS.md).
All forms run under TRITON_INTERPRET=1 with pointer loads.
"""

import triton
import triton.language as tl

from ._tiles import dot_nt, grouped_ids, load_tile

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
# Stands in for -inf in the padded columns of the last vocab tile (divided by inv_t, so
# that z stays finite): exp of it is 0 and, unlike -inf, 0 * it is 0, so t stays finite.
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit
def _fold_tile(acc, v0, labels, V, inv_t, inv_t_col, m_i, s_i, t_i, zl_i,
               BLOCK_V: tl.constexpr, WITH_ENTROPY: tl.constexpr):
    """Fold one [BLOCK_M, BLOCK_V] tile of raw logits ``acc`` into the running stats.

    m = max z, s = sum exp(z - m), t = sum exp(z - m) (z - m) (relative to the running
    max, as the stage contract has it), zl = z[label].

    ``inv_t`` / ``inv_t_col``: the same scalar twice, or (per-row temperatures) the rows'
    values as [BLOCK_M] and as [BLOCK_M, 1], for the row sums and for the tile.
    """
    zl_i += _label_logit(acc, v0, labels, inv_t, BLOCK_V)
    acc = _pad_tile(acc, v0, V, inv_t_col, BLOCK_V)
    m_i, s_i, t_i = _fold_max(acc, tl.max(acc, axis=1), inv_t, inv_t_col, m_i, s_i, t_i,
                              WITH_ENTROPY)
    return m_i, s_i, t_i, zl_i


@triton.jit
def _label_logit(acc, v0, labels, inv_t, BLOCK_V: tl.constexpr):
    """z[label] of each row within this tile (0 where the label is elsewhere): at most one
    column of one tile matches; inv_t applied to the row sum."""
    cols = v0 + tl.arange(0, BLOCK_V)
    return tl.sum(tl.where(cols[None, :] == labels[:, None], acc, 0.0), axis=1) * inv_t


@triton.jit
def _pad_tile(acc, v0, V, inv_t_col, BLOCK_V: tl.constexpr):
    """Only the last vocab tile has padded (zero-filled) columns: NEG_BIG there."""
    if v0 + BLOCK_V > V:
        cols = v0 + tl.arange(0, BLOCK_V)
        acc = tl.where(cols[None, :] < V, acc, NEG_BIG / tl.maximum(inv_t_col, 1.0))
    return acc


@triton.jit
def _fold_max(acc, acc_max, inv_t, inv_t_col, m_i, s_i, t_i, WITH_ENTROPY: tl.constexpr):
    """The fold of a padded tile whose row maxima ``acc_max`` (raw) are known.

    Work in log2 units: with u = (z - m) log2(e), exp(z - m) = exp2(u) costs one FMA and
    one MUFU op per logit, and t = ln(2) sum exp2(u) u.
    """
    # inv_t > 0, so max(acc) * inv_t == max(acc * inv_t) bit for bit.
    m_new = tl.maximum(m_i, acc_max * inv_t)
    m2 = m_new * LOG2E
    alpha = tl.exp2(m_i * LOG2E - m2)
    u = acc * (inv_t_col * LOG2E) - m2[:, None]
    p = tl.exp2(u)
    if WITH_ENTROPY:
        # move t's reference point from m to m_new: t' = alpha (t + s (m - m_new))
        moved = tl.where(s_i > 0, s_i * (m_i - m_new), 0.0)
        t_i = alpha * (t_i + moved) + tl.sum(p * u, axis=1) * LN2
    s_i = s_i * alpha + tl.sum(p, axis=1)
    return m_new, s_i, t_i


@triton.jit
def forward_stats_kernel(
    h_src, w_src, labels_ptr, part_ptr, inv_t_ptr,
    N, V, H, stride_h, stride_w, inv_t,
    num_splits, tiles_per_split, group_m,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    WITH_ENTROPY: tl.constexpr, USE_TMA: tl.constexpr, LOOP: tl.constexpr,
    WARP_SPEC: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
    ROW_INV_T: tl.constexpr,
):
    """``ROW_INV_T``: per-row inverse temperatures at ``inv_t_ptr`` [N] (``inv_t`` unused);
    else the scalar ``inv_t`` for every row (``inv_t_ptr`` unused)."""
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

    if LOOP == 2:
        acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
        for it in tl.range(0, (v_end - v_begin) * k_tiles, warp_specialize=WARP_SPEC):
            vt = v_begin + it // k_tiles
            kk = it % k_tiles
            a = load_tile(h_src, m0, kk * BLOCK_K, N, H, stride_h, BLOCK_M, BLOCK_K, USE_TMA)
            b = load_tile(w_src, vt * BLOCK_V, kk * BLOCK_K, V, H, stride_w, BLOCK_V, BLOCK_K,
                          USE_TMA)
            acc = dot_nt(a, b, acc, DOT_PRECISION, UPCAST_DOT)
            if kk == k_tiles - 1:
                m_i, s_i, t_i, zl_i = _fold_tile(acc, vt * BLOCK_V, labels, V, inv_t, inv_t_col,
                                                  m_i, s_i, t_i, zl_i, BLOCK_V, WITH_ENTROPY)
                acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
    else:
        for vt in tl.range(v_begin, v_end, flatten=LOOP == 1):
            v0 = vt * BLOCK_V
            acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
            for kk in tl.range(0, k_tiles, warp_specialize=WARP_SPEC):
                a = load_tile(h_src, m0, kk * BLOCK_K, N, H, stride_h, BLOCK_M, BLOCK_K, USE_TMA)
                b = load_tile(w_src, v0, kk * BLOCK_K, V, H, stride_w, BLOCK_V, BLOCK_K, USE_TMA)
                acc = dot_nt(a, b, acc, DOT_PRECISION, UPCAST_DOT)
            m_i, s_i, t_i, zl_i = _fold_tile(acc, v0, labels, V, inv_t, inv_t_col,
                                              m_i, s_i, t_i, zl_i, BLOCK_V, WITH_ENTROPY)

    out = part_ptr + (split.to(tl.int64) * N + rows) * 4
    keep = rows < N
    tl.store(out + 0, m_i, mask=keep)
    tl.store(out + 1, s_i, mask=keep)
    tl.store(out + 2, t_i, mask=keep)
    tl.store(out + 3, zl_i, mask=keep)
