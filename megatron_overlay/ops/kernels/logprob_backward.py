"""Backward, stage 1: recompute each logits tile and turn it into d(loss)/d(logits).

For a [BLOCK_M, BLOCK_V] tile: acc = hidden_tile @ W_tile.T (tensor cores, fp32), then in
registers, with z = acc * inv_t and p = exp(z - lse):

    d logits = inv_t * ( 1[j = label] * g_lp  -  p * (g_lp + g_ent * (z - E_p[z])) )

(d/dz log p_y = 1[j=y] - p_j; d/dz H = -p_j (z_j - E_p[z]); dz/dlogit = 1/T), stored in
the input dtype to a [rows, vocab-chunk] buffer. Stage 2 (gemm_fp32.py) hands
that buffer to cuBLAS for the two gradient GEMMs, d_hidden += G @ W and d_W = G.T @ h,
with fp32 outputs: at H in the thousands a [BLOCK_M, H] fp32 d_hidden accumulator does not
fit on chip, so fusing those GEMMs into this kernel would mean fp32 atomics over the whole
of d_hidden and d_W per tile (verl's split-N mode: ~2x the GEMM time); a bf16 tile of
G costs one extra write+read of N x V_chunk x 2 bytes, ~4% of a GEMM's time here.

Persistent grid: ``num_progs`` programs stride over the tiles in grouped order; with
``FLATTEN`` the compiler flattens tile and K loops so the next tile's loads overlap this
tile's epilogue (the pattern of Triton's persistent-matmul tutorial). ``num_progs`` equal to
the tile count gives the plain one-tile-per-program grid.

Launch (below the kernel): ``backward``, the stage contract's backward (ops/stages.py):
token blocks and vocab chunks under a memory budget, this kernel, the sparse terms
(sparse_grad.py) and the two GEMMs (gemm_fp32.py).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .. import row_flags
from . import autotune_configs
from ._tiles import grouped_ids, mma_step, round_logits
from .autotune_configs import KernelConfig
from .gemm_fp32 import matmul_fp32
from .launch import (cdiv, check_device, default_tma, dot_precision, interpreting,
                     inv_t_args, launch, lo_operand, logits_rounding, mma_dtype, rowmajor,
                     sm_count, tile_source, tma_aligned, upcast_dot)
from .sparse_grad import add_sparse_grad
from .split_operand import split_hi_lo_into

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _row_terms(m0, N, V, labels_ptr, label_shift, lse_ptr, mean_z_ptr, g_lp_ptr, g_ent_ptr,
               stride_glp, stride_gent, inv_t, inv_t_ptr, valid_ptr, bad_ptr,
               BLOCK_M: tl.constexpr,
               HAS_ENTROPY: tl.constexpr, ROW_INV_T: tl.constexpr, HAS_LABELS: tl.constexpr,
               HAS_FLAGS: tl.constexpr):
    """The per-row inputs of the token tile at m0: (inv_t: the scalar or a [BLOCK_M, 1]
    column, lse, g_lp, mean_z, g_ent, the label's column in this vocab chunk or -1).
    g_lp / g_ent at their strides (0: a loss's sum() or mean() hands one value expanded).
    ``HAS_FLAGS``: the rows' valid / bad flags (int8) applied to the gradients as the stage
    contract says (0 where not valid, g_lp NaN where bad)."""
    rows = m0 + tl.arange(0, BLOCK_M)
    keep = rows < N
    if ROW_INV_T:  # per-row temperatures: a [BLOCK_M, 1] column instead of the scalar
        inv_t = tl.load(inv_t_ptr + rows, mask=keep, other=1.0)[:, None]
    lse = tl.load(lse_ptr + rows, mask=keep, other=0.0)
    g_lp = tl.load(g_lp_ptr + rows * stride_glp, mask=keep, other=0.0)
    mean_z, g_ent = lse, lse  # placeholders without entropy
    if HAS_ENTROPY:
        mean_z = tl.load(mean_z_ptr + rows, mask=keep, other=0.0)
        g_ent = tl.load(g_ent_ptr + rows * stride_gent, mask=keep, other=0.0)
    if HAS_FLAGS:
        valid = tl.load(valid_ptr + rows, mask=keep, other=0) != 0
        g_lp = tl.where(valid, g_lp, 0.0)
        g_lp = tl.where(tl.load(bad_ptr + rows, mask=keep, other=0) != 0, float("nan"), g_lp)
        if HAS_ENTROPY:
            g_ent = tl.where(valid, g_ent, 0.0)
    labels = tl.full([BLOCK_M], -1, tl.int32)
    if HAS_LABELS:  # the label's column, relative to this vocab chunk (outside it: none)
        labels = tl.load(labels_ptr + rows, mask=keep, other=-1) - label_shift
        labels = tl.where((labels >= 0) & (labels < V), labels, -1).to(tl.int32)
    return inv_t, lse, g_lp, mean_z, g_ent, labels


@triton.jit
def _store_grad(acc, g_dst, m0, col0, N, V, stride_g, inv_t, lse, g_lp, mean_z, g_ent, labels,
                scale, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, HAS_ENTROPY: tl.constexpr,
                HAS_LABELS: tl.constexpr, USE_TMA: tl.constexpr):
    """d(logits) of the [BLOCK_M, WIDTH] logits ``acc`` at (m0, col0) (row terms:
    _row_terms'), stored to ``g_dst``: a TMA descriptor (``USE_TMA``), or a pointer."""
    cols = col0 + tl.arange(0, WIDTH)
    p = tl.exp2(acc * (inv_t * LOG2E) - (lse * LOG2E)[:, None])
    if HAS_ENTROPY:
        coef = g_lp[:, None] + g_ent[:, None] * (acc * inv_t - mean_z[:, None])
    else:
        coef = g_lp[:, None]
    grad = -p * coef
    if HAS_LABELS:
        grad += tl.where(cols[None, :] == labels[:, None], g_lp[:, None], 0.0)
    grad = grad * (inv_t * scale)
    if USE_TMA:  # the copy engine clips the out-of-bounds part of the box
        g_dst.store([m0, col0], grad.to(g_dst.dtype))
    else:
        rows = m0 + tl.arange(0, BLOCK_M)
        ptrs = g_dst + rows[:, None].to(tl.int64) * stride_g + cols[None, :]
        tl.store(ptrs, grad.to(g_dst.dtype.element_ty),
                 mask=(rows[:, None] < N) & (cols[None, :] < V))


@triton.jit
def grad_logits_kernel(
    h_src, h_lo_src, w_src, w_lo_src, g_dst, labels_ptr, lse_ptr, mean_z_ptr, g_lp_ptr,
    g_ent_ptr, scale_ptr, inv_t_ptr, valid_ptr, bad_ptr, N, V, H, stride_h, stride_w,
    stride_g, stride_glp, stride_gent, inv_t, label_shift,
    group_m, num_progs,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_ENTROPY: tl.constexpr, HAS_SCALE: tl.constexpr, USE_TMA: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
    ROW_INV_T: tl.constexpr, LOGITS_DTYPE: tl.constexpr, LO: tl.constexpr,
    HAS_LABELS: tl.constexpr, SUBTILE: tl.constexpr, HAS_FLAGS: tl.constexpr,
):
    """``labels_ptr`` holds this shard's labels; less ``label_shift`` (the chunk's first
    column) they index this vocab chunk (outside [0, V): none). ``HAS_LABELS`` False: no
    label in any row (``labels_ptr`` unused). ``HAS_FLAGS``: ``valid_ptr`` / ``bad_ptr``
    [N] int8, the rows' flags applied to g_lp and g_ent (``_row_terms``).
    ``ROW_INV_T``: per-row inverse temperatures at ``inv_t_ptr`` [N], else the scalar.
    ``LOGITS_DTYPE``: the recomputed tile rounded as the forward's was (the gradient
    passes through the rounding); ``LO``: an fp32 operand as its hi and lo parts, as the
    forward's (``_tiles.mma_step``). ``SUBTILE``: the epilogue in two [BLOCK_M, BLOCK_V / 2]
    halves (``g_dst``'s TMA box is a half), as Triton's persistent matmul tutorial's
    EPILOGUE_SUBTILE: fewer live registers beside the next tile's loads, which lets the
    flattened loop (``FLATTEN``) overlap them without spilling."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(N, BLOCK_M)
    num_v = tl.cdiv(V, BLOCK_V)
    num_tiles = num_m * num_v
    k_tiles = tl.cdiv(H, BLOCK_K)
    scale = 1.0
    if HAS_SCALE:
        scale = tl.load(scale_ptr)
    # The epilogue recomputes the tile's ids from its own counter (as Triton's persistent
    # matmul does) so that no value lives across the flattened loop's prologue and epilogue.
    tile_c = pid - num_progs
    for tile in tl.range(pid, num_tiles, num_progs, flatten=FLATTEN,
                         warp_specialize=WARP_SPEC):
        pid_m, pid_v = grouped_ids(tile, num_m, num_v, group_m)
        acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
        for kk in range(k_tiles):
            acc = mma_step(h_src, h_lo_src, w_src, w_lo_src, pid_m * BLOCK_M, pid_v * BLOCK_V,
                           kk * BLOCK_K, N, V, H, stride_h, stride_w, acc, BLOCK_M, BLOCK_V,
                           BLOCK_K, USE_TMA, LO, DOT_PRECISION, UPCAST_DOT)

        tile_c += num_progs
        pid_m, pid_v = grouped_ids(tile_c, num_m, num_v, group_m)
        m0 = pid_m * BLOCK_M
        v0 = pid_v * BLOCK_V
        inv_t_r, lse, g_lp, mean_z, g_ent, labels = _row_terms(
            m0, N, V, labels_ptr, label_shift, lse_ptr, mean_z_ptr, g_lp_ptr, g_ent_ptr,
            stride_glp, stride_gent, inv_t, inv_t_ptr, valid_ptr, bad_ptr, BLOCK_M,
            HAS_ENTROPY, ROW_INV_T, HAS_LABELS, HAS_FLAGS)
        acc = round_logits(acc, LOGITS_DTYPE)
        if SUBTILE:
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_V // 2)),
                                             (0, 2, 1)))
            _store_grad(acc0, g_dst, m0, v0, N, V, stride_g, inv_t_r, lse, g_lp, mean_z,
                        g_ent, labels, scale, BLOCK_M, BLOCK_V // 2, HAS_ENTROPY, HAS_LABELS,
                        USE_TMA)
            _store_grad(acc1, g_dst, m0, v0 + BLOCK_V // 2, N, V, stride_g, inv_t_r, lse,
                        g_lp, mean_z, g_ent, labels, scale, BLOCK_M, BLOCK_V // 2,
                        HAS_ENTROPY, HAS_LABELS, USE_TMA)
        else:
            _store_grad(acc, g_dst, m0, v0, N, V, stride_g, inv_t_r, lse, g_lp, mean_z,
                        g_ent, labels, scale, BLOCK_M, BLOCK_V, HAS_ENTROPY, HAS_LABELS,
                        USE_TMA)


# ----------------------------------------------------------------------------- launch

# The backward may cut the vocab into up to this many chunks more than its budget needs,
# where that fills the recompute kernel's waves: at 16384 tokens, V = 152064, H = 3584 the
# budget's 8 chunks of 75 tiles (64 x 75 = 4800 tiles a launch: 36.4 waves of 132
# programs) end each launch on a part-empty wave, 9 chunks of 66 (4224: 32 waves) on none.
# A chunk is charged CHUNK_COST_WAVES waves of its own (its cuBLAS calls, the fp32
# d_hidden accumulator read and written again): an estimate, not yet measured.
MAX_EXTRA_CHUNKS = 2
CHUNK_COST_WAVES = 1


@functools.lru_cache(maxsize=256)  # a pure function of ints, asked once a backward call
def _vocab_chunk(vocab: int, column_bytes: int, block_v: int, budget: int,
                 tiles_m: int = 0, programs: int = 0) -> int:
    """Vocab columns per chunk: as wide as ``budget`` allows at ``column_bytes`` a column,
    in equal chunks of whole tiles. ``programs`` (a wave's, 0: the budget's count) and
    ``tiles_m`` (a token block's row tiles): of that chunk count and up to
    MAX_EXTRA_CHUNKS more, the one whose launches take the fewest waves of tiles,
    CHUNK_COST_WAVES counted for each chunk (ties: fewer chunks)."""
    least = max(1, math.ceil(vocab * column_bytes / budget))

    def width(chunks: int) -> int:
        return min(cdiv(cdiv(vocab, chunks), block_v) * block_v, cdiv(vocab, block_v) * block_v)

    def cost(chunks: int) -> int:
        w = width(chunks)
        return sum(cdiv(tiles_m * cdiv(min(w, vocab - v0), block_v), programs)
                   + CHUNK_COST_WAVES for v0 in range(0, vocab, w))

    if not programs:
        return width(least)
    return width(min(range(least, least + MAX_EXTRA_CHUNKS + 1), key=lambda c: (cost(c), c)))


def _parts(hi: torch.Tensor, lo: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """An fp32 operand's halves in the GEMM of the other operand's (16-bit) gradient."""
    return (lo, hi) if autotune_configs.MIXED_GRAD16_WITH_LO else (hi,)


def backward(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor | None,
             inv_temperature, lse: torch.Tensor, mean_z: torch.Tensor | None,
             grad_logprob: torch.Tensor, grad_entropy: torch.Tensor | None, *,
             config: KernelConfig | None = None, use_tma: bool | None = None,
             chunk_budget: int | None = None, d_weight_dtype: torch.dtype | None = None,
             d_hidden_dtype: torch.dtype | None = None, block_tokens: int | None = None,
             sparse_ids: torch.Tensor | None = None, sparse_grads: torch.Tensor | None = None,
             logits_dtype: torch.dtype | None = None, need_d_hidden: bool = True,
             need_d_weight: bool = True, valid: torch.Tensor | None = None,
             bad: torch.Tensor | None = None):
    """The contract's backward. Opt-in extras (defaults fp32, as the contract says):
    ``d_weight_dtype`` / ``d_hidden_dtype`` let cuBLAS write the gradients in e.g. the
    inputs' dtype, saving an fp32 copy of each and its cast.

    Memory (autotune_configs.BACKWARD_EXTRA_BUDGET_BYTES): tokens go in blocks of
    ``block_tokens``; each block's d_hidden is accumulated over vocab chunks in fp32 and
    rounded once; d_weight is written by the first block and accumulated by the others
    (in d_weight_dtype: one rounding per token block; a single block, N <= block_tokens,
    is exactly one rounding of an fp32-accumulated product). ``chunk_budget`` caps the
    d(logits) chunk's bytes (tests), default what the budget leaves.

    ``sparse_ids`` / ``sparse_grads``: the contract's sparse indicator terms, added to each
    d(logits) chunk by sparse_grad.py before the GEMMs.

    Mixed operands (one fp32, one 16-bit): d(logits) is kept in the 16-bit dtype, and the
    fp32 operand goes to the recompute kernel as hi + lo in it (split_operand.py), and to
    cuBLAS as hi + lo (two GEMMs accumulated in fp32) for its own gradient, as hi alone for
    the 16-bit operand's (autotune_configs.MIXED_GRAD16_WITH_LO); split a piece at a time
    within the budget: the fp32 weight's vocab chunk, or the fp32 hidden states' token
    block."""
    row_flags.check_pair(valid, bad)
    check_device(hidden, weight, *([] if local_labels is None else [local_labels]))
    rounding = logits_rounding(logits_dtype)
    n_tokens, hidden_size = hidden.shape
    vocab = weight.shape[0]
    dev = hidden.device
    if not (need_d_hidden or need_d_weight):
        return None, None
    if n_tokens == 0 or vocab == 0:
        return (torch.zeros(n_tokens, hidden_size, dtype=torch.float32, device=dev)
                if need_d_hidden else None,
                torch.zeros(vocab, hidden_size, dtype=torch.float32, device=dev)
                if need_d_weight else None)
    dw_dtype = d_weight_dtype or torch.float32
    dh_dtype = d_hidden_dtype or torch.float32
    mma = mma_dtype(hidden, weight)  # also d(logits)'s dtype
    lo = lo_operand(hidden, weight)
    split_h, split_w = lo == 1, lo == 2
    if not hidden.is_cuda or mma == torch.float16:
        # CPU (interpreter) path; fp16's scaled buffer (below) is unscaled in fp32
        dw_dtype = dh_dtype = torch.float32
    hidden, weight = rowmajor(hidden), rowmajor(weight)
    has_entropy = grad_entropy is not None and mean_z is not None
    flags = None if valid is None else (valid, bad)
    f32 = lambda t: t.to(torch.float32).contiguous()  # noqa: E731
    # the rows' gradients as they come if fp32, at any stride: a loss's sum() or mean()
    # hands its one value expanded (stride 0), of which a contiguous copy was a launch
    rows_f32 = lambda t: t if t.dtype == torch.float32 else t.float()  # noqa: E731
    lse, g_lp = f32(lse), rows_f32(grad_logprob)
    mean_z = f32(mean_z) if has_entropy else lse
    g_ent = rows_f32(grad_entropy) if has_entropy else lse

    tma = default_tma(hidden, weight) if use_tma is None else use_tma
    cfg = config or autotune_configs.backward_config(mma, tma, interpreting(), lo)

    # fp16 only: d(logits) ~ p * g underflows fp16 for typical loss scales (g ~ 1/N), so
    # the buffer holds it times 1 / max|g| and the GEMM results are scaled back.
    unscale = None
    if mma == torch.float16:
        # of the gradients as the kernel takes them (flags), a bad row's NaN left out: it
        # makes that row's d_hidden NaN, not every row's through the scale
        taken_lp, taken_ent = row_flags.masked_row_grads(g_lp, g_ent if has_entropy else None,
                                                         valid, bad, bad_as_nan=False)
        unscale = taken_lp.abs().amax()
        if has_entropy:
            unscale = unscale + taken_ent.abs().amax()
        unscale = unscale.clamp_min(1e-30).reshape(1)
        scale = (1.0 / unscale).contiguous()
    else:
        scale = lse  # unused (HAS_SCALE=False)

    elem = mma.itemsize
    block_rows = min(n_tokens, block_tokens or autotune_configs.BACKWARD_BLOCK_TOKENS)
    # a column: its d(logits) entries, and an fp32 weight row's hi + lo halves
    column_bytes = block_rows * elem + (2 * hidden_size * elem if split_w else 0)

    def accumulator(direct: bool) -> bool:
        # a token block's 16-bit d_hidden is accumulated over the vocab chunks in fp32,
        # unless it is written directly (one chunk, below)
        return need_d_hidden and dh_dtype != torch.float32 and not direct

    def chunk_budget_for(direct: bool) -> int:
        # beside the chunk: that fp32 accumulator and an fp32 hidden block's hi + lo halves
        extra = block_rows * hidden_size * 4 if accumulator(direct) else 0
        extra += 2 * block_rows * hidden_size * elem if split_h else 0
        return chunk_budget or max(autotune_configs.BACKWARD_EXTRA_BUDGET_BYTES - extra,
                                   autotune_configs.BACKWARD_MIN_CHUNK_BYTES)

    # A 16-bit d_hidden whose vocab fits one chunk (and whose weight is one part) comes
    # out of one cuBLAS product in its dtype: one rounding of the fp32 accumulation, as the
    # accumulator's copy gives, without the accumulator and the copy's launch.
    dh_direct = bool(autotune_configs.BACKWARD_DIRECT_D_HIDDEN) and accumulator(False) \
        and not split_w and vocab * column_bytes <= chunk_budget_for(True)
    # a direct d_hidden is one chunk's product (no accumulator): never cut further. The
    # waves: of one program a multiprocessor, persistent or not (a tile's registers and
    # shared memory take one), so every form of a config gets the same chunks
    width_max = _vocab_chunk(vocab, column_bytes, cfg.block_v, chunk_budget_for(dh_direct),
                             cdiv(block_rows, cfg.block_m), 0 if dh_direct else sm_count(dev))
    # Both are written whole: d_hidden block by block, d_weight by the first token block;
    # where one product writes a whole gradient in its 16-bit dtype (one token block, and
    # one vocab chunk for d_weight), cuBLAS allocates it (torch.mm without out=: the same
    # product, an allocation and out='s checks less a call)
    one_block = block_rows >= n_tokens
    dh_made = dh_direct and one_block
    dw_made = need_d_weight and one_block and width_max >= vocab and dw_dtype == mma \
        and mma != torch.float32 and not split_h
    d_hidden = torch.empty(n_tokens, hidden_size, dtype=dh_dtype, device=dev) \
        if need_d_hidden and not dh_made else None
    d_weight = torch.empty(vocab, hidden_size, dtype=dw_dtype, device=dev) \
        if need_d_weight and not dw_made else None
    row_pitch = cdiv(width_max, 16 // elem) * (16 // elem)  # 16-byte aligned rows
    grad_buf = torch.empty(block_rows, row_pitch, dtype=mma, device=dev)
    dh_acc = torch.empty(block_rows, hidden_size, dtype=torch.float32, device=dev) \
        if accumulator(dh_direct) else None
    h_halves = torch.empty(2, block_rows, hidden_size, dtype=mma, device=dev) if split_h \
        else None
    w_halves = torch.empty(2, width_max, hidden_size, dtype=mma, device=dev) if split_w \
        else None
    labels = None if local_labels is None else local_labels.contiguous()
    inv_t_rows, inv_t = inv_t_args(inv_temperature)
    sparse = None
    if sparse_ids is not None:  # d(logits) entries g * inv_t (* the fp16 buffer's scale)
        sparse = (sparse_ids.contiguous(), rows_f32(sparse_grads))

    # one token block / vocab chunk (small N): no slices, each view costs host time
    whole = lambda t, part: t if one_block else t[part]  # noqa: E731
    for r0 in range(0, n_tokens, block_rows):
        rows = min(block_rows, n_tokens - r0)
        blk = slice(r0, r0 + rows)
        h_blk = whole(hidden, blk)
        lab_blk = lse if labels is None else whole(labels, blk)  # lse: unused
        dh = None if d_hidden is None else whole(d_hidden, blk) if dh_acc is None else \
            dh_acc if rows == block_rows else dh_acc[:rows]
        # the block, or an fp32 block's (hi, lo)
        h_hi, h_lo = split_hi_lo_into(h_blk, h_halves) if split_h else (h_blk, h_blk)
        num_m = cdiv(rows, cfg.block_m)
        # the block's per-row arguments, sliced once a block, not once a vocab chunk: at
        # 32768 tokens (4 blocks x 9 chunks) torch.profiler counted 312 slices a fwd+bwd
        # call on an H100 (docs/BENCHMARKS.md, pass 13), ~190 of them these (a slice 0.9
        # us, with a view 1.4, on the CPU machine)
        inv_t_blk = None if inv_t_rows is None else whole(inv_t_rows, blk)
        row_args = (lab_blk, whole(lse, blk), whole(mean_z, blk), whole(g_lp, blk),
                    whole(g_ent, blk), scale, lse if inv_t_blk is None else inv_t_blk,
                    *((lse, lse) if flags is None else
                      (whole(flags[0], blk).view(torch.int8),
                       whole(flags[1], blk).view(torch.int8))))
        sparse_blk = None if sparse is None else (whole(sparse[0], blk), whole(sparse[1], blk))
        for v0 in range(0, vocab, width_max):
            width = min(width_max, vocab - v0)
            w_chunk = weight if width == vocab else weight[v0:v0 + width]
            w_hi, w_lo = split_hi_lo_into(w_chunk, w_halves) if split_w else (w_chunk, w_chunk)
            grad = grad_buf[:rows, :width]
            chunk_tma = tma and tma_aligned(w_hi) and tma_aligned(h_hi)
            num_tiles = num_m * cdiv(width, cfg.block_v)
            progs = min(num_tiles, sm_count(dev)) if cfg.persistent else num_tiles
            h_src = tile_source(h_hi, [cfg.block_m, cfg.block_k], chunk_tma)
            w_src = tile_source(w_hi, [cfg.block_v, cfg.block_k], chunk_tma)
            # a lo part not in use goes as None, as in the forward: the launcher fills a
            # TMA descriptor for each one it is given, the same one twice included
            launch(grad_logits_kernel, (progs,),
                h_src, tile_source(h_lo, [cfg.block_m, cfg.block_k], chunk_tma) if split_h
                else None,
                w_src, tile_source(w_lo, [cfg.block_v, cfg.block_k], chunk_tma) if split_w
                else None,
                tile_source(grad, [cfg.block_m, cfg.block_v // (1 + cfg.epilogue_subtile)],
                            chunk_tma),
                *row_args, rows, width, hidden_size, h_hi.stride(0), w_hi.stride(0),
                grad.stride(0), g_lp.stride(0), g_ent.stride(0), inv_t, v0, cfg.group_m, progs,
                BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
                HAS_ENTROPY=has_entropy, HAS_SCALE=unscale is not None, USE_TMA=chunk_tma,
                FLATTEN=cfg.loop == 1, WARP_SPEC=cfg.warp_specialize,
                DOT_PRECISION=dot_precision(mma), UPCAST_DOT=upcast_dot(mma),
                ROW_INV_T=inv_t_rows is not None, LOGITS_DTYPE=rounding, LO=lo,
                HAS_LABELS=labels is not None, SUBTILE=cfg.epilogue_subtile,
                HAS_FLAGS=flags is not None,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            )
            if sparse is not None:
                add_sparse_grad(grad, *sparse_blk, v0, width, inv_t, inv_t_blk,
                                scale if unscale is not None else None)
            # an fp32 operand enters only the GEMM of the other (16-bit) operand's gradient:
            # as hi alone, or lo then hi (autotune_configs.MIXED_GRAD16_WITH_LO)
            if dh_made:  # one block, one chunk, one part: the product is d_hidden
                d_hidden = torch.mm(grad, w_chunk)
            elif dh_direct:  # one chunk, one part: cuBLAS writes the 16-bit block itself
                torch.mm(grad, w_chunk, out=dh)
            elif dh is not None:
                for i, part in enumerate(_parts(w_hi, w_lo) if split_w else (w_chunk,)):
                    matmul_fp32(grad, part, dh, accumulate=v0 > 0 or i > 0)
            if dw_made:  # one block, one chunk: the product is d_weight
                d_weight = torch.mm(grad.T, h_blk)
                continue
            if d_weight is None:
                continue
            dw = d_weight if width == vocab else d_weight[v0:v0 + width]
            for i, part in enumerate(_parts(h_hi, h_lo) if split_h else (h_blk,)):
                first = r0 == 0 and i == 0
                if d_weight.dtype == mma and mma != torch.float32:
                    if first:
                        torch.mm(grad.T, part, out=dw)
                    else:  # cuBLAS: fp32 accumulation, one rounding of (dw + grad.T @ part)
                        dw.addmm_(grad.T, part)
                else:
                    matmul_fp32(grad.T, part, dw, accumulate=not first)
        if dh_acc is not None:
            whole(d_hidden, blk).copy_(dh)

    if unscale is not None:
        for grad_out in (d_hidden, d_weight):
            if grad_out is not None:
                grad_out.mul_(unscale)
    return d_hidden, d_weight
