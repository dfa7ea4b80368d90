"""Backward, stage 1: recompute each logits tile and turn it into d(loss)/d(logits).

For a [BLOCK_M, BLOCK_V] tile: acc = hidden_tile @ W_tile.T (tensor cores, fp32), then in
registers, with z = acc * inv_t and p = exp(z - lse):

    d logits = inv_t * ( 1[j = label] * g_lp  -  p * (g_lp + g_ent * (z - E_p[z])) )

(d/dz log p_y = 1[j=y] - p_j; d/dz H = -p_j (z_j - E_p[z]); dz/dlogit = 1/T), stored in
the input dtype to a [rows, vocab-chunk] buffer. Stage 2 (triton_impl.backward) hands
that buffer to cuBLAS for the two gradient GEMMs, d_hidden += G @ W and d_W = G.T @ h,
with fp32 outputs: at H in the thousands a [BLOCK_M, H] fp32 d_hidden accumulator does not
fit on chip, so fusing those GEMMs into this kernel would mean fp32 atomics over the whole
of d_hidden and d_W per tile (verl's split-N mode: ~2x the GEMM time); a bf16 tile of
G costs one extra write+read of N x V_chunk x 2 bytes, ~4% of a GEMM's time here.

Persistent grid: ``num_progs`` programs stride over the tiles in grouped order; with
``FLATTEN`` the compiler flattens tile and K loops so the next tile's loads overlap this
tile's epilogue (the pattern of Triton's persistent-matmul tutorial). ``num_progs`` equal to
the tile count gives the plain one-tile-per-program grid.
"""

import triton
import triton.language as tl

from ._tiles import dot_nt, grouped_ids, load_tile

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _grad_tile(acc, rows, cols, N, labels_ptr, lse_ptr, mean_z_ptr, g_lp_ptr, g_ent_ptr,
               inv_t, inv_t_ptr, scale, HAS_ENTROPY: tl.constexpr, ROW_INV_T: tl.constexpr):
    keep = rows < N
    if ROW_INV_T:  # per-row temperatures: a [BLOCK_M, 1] column instead of the scalar
        inv_t = tl.load(inv_t_ptr + rows, mask=keep, other=1.0)[:, None]
    lse = tl.load(lse_ptr + rows, mask=keep, other=0.0)
    g_lp = tl.load(g_lp_ptr + rows, mask=keep, other=0.0)
    labels = tl.load(labels_ptr + rows, mask=keep, other=-1).to(tl.int32)
    p = tl.exp2(acc * (inv_t * LOG2E) - (lse * LOG2E)[:, None])
    if HAS_ENTROPY:
        mean_z = tl.load(mean_z_ptr + rows, mask=keep, other=0.0)
        g_ent = tl.load(g_ent_ptr + rows, mask=keep, other=0.0)
        coef = g_lp[:, None] + g_ent[:, None] * (acc * inv_t - mean_z[:, None])
    else:
        coef = g_lp[:, None]
    grad = tl.where(cols[None, :] == labels[:, None], g_lp[:, None], 0.0) - p * coef
    return grad * (inv_t * scale)


@triton.jit
def grad_logits_kernel(
    h_src, w_src, g_dst, labels_ptr, lse_ptr, mean_z_ptr, g_lp_ptr, g_ent_ptr, scale_ptr,
    inv_t_ptr, N, V, H, stride_h, stride_w, stride_g, inv_t, group_m, num_progs,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_ENTROPY: tl.constexpr, HAS_SCALE: tl.constexpr, USE_TMA: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
    ROW_INV_T: tl.constexpr,
):
    """``labels_ptr`` holds labels relative to this vocab chunk (-1 or out of range: none).
    ``ROW_INV_T``: per-row inverse temperatures at ``inv_t_ptr`` [N], else the scalar."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(N, BLOCK_M)
    num_v = tl.cdiv(V, BLOCK_V)
    num_tiles = num_m * num_v
    k_tiles = tl.cdiv(H, BLOCK_K)
    scale = 1.0
    if HAS_SCALE:
        scale = tl.load(scale_ptr)
    out_dtype = g_dst.dtype if USE_TMA else g_dst.dtype.element_ty
    # The epilogue recomputes the tile's ids from its own counter (as Triton's persistent
    # matmul does) so that no value lives across the flattened loop's prologue and epilogue.
    tile_c = pid - num_progs
    for tile in tl.range(pid, num_tiles, num_progs, flatten=FLATTEN,
                         warp_specialize=WARP_SPEC):
        pid_m, pid_v = grouped_ids(tile, num_m, num_v, group_m)
        m0 = pid_m * BLOCK_M
        v0 = pid_v * BLOCK_V
        acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
        for kk in range(k_tiles):
            a = load_tile(h_src, m0, kk * BLOCK_K, N, H, stride_h, BLOCK_M, BLOCK_K, USE_TMA)
            b = load_tile(w_src, v0, kk * BLOCK_K, V, H, stride_w, BLOCK_V, BLOCK_K, USE_TMA)
            acc = dot_nt(a, b, acc, DOT_PRECISION, UPCAST_DOT)

        tile_c += num_progs
        pid_m, pid_v = grouped_ids(tile_c, num_m, num_v, group_m)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
        grad = _grad_tile(acc, rows, cols, N, labels_ptr, lse_ptr, mean_z_ptr, g_lp_ptr,
                          g_ent_ptr, inv_t, inv_t_ptr, scale, HAS_ENTROPY,
                          ROW_INV_T).to(out_dtype)
        if USE_TMA:  # the copy engine clips the out-of-bounds part of the box
            g_dst.store([pid_m * BLOCK_M, pid_v * BLOCK_V], grad)
        else:
            ptrs = g_dst + rows[:, None].to(tl.int64) * stride_g + cols[None, :]
            tl.store(ptrs, grad, mask=(rows[:, None] < N) & (cols[None, :] < V))
