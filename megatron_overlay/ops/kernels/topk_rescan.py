"""Top-k, second stage: recompute each row's candidate vocab tiles and take its top k there.

The forward kernel (topk_forward.py) stores each (row, vocab tile)'s maximum of z (the
logits times the row's inverse temperature, as returned: ``rank_scale``) and
merge_topk.best_tiles picks each row's k tiles with the largest. Each of the row's top-k
z lies in one of them: the k-th largest tile maximum ``thr`` is a z, so the row's k-th
largest z is >= thr, and a tile whose maximum is below thr holds nothing >= thr (of
tiles tied at thr, those with the lower ids are kept, which hold the lower ids).

Here the (row, candidate tile) pairs, ordered by tile (tile_sort.py: a stable counting
sort, one or two launches), are recomputed a segment at a time: a program takes one
segment, at most BLOCK_R consecutive pairs of one tile (the sort's runs table says
which), one MMA of the pairs' gathered hidden rows against the tile's weight rows,
scaled to z, then takes each row's z >= thr, largest first (ties to the lower column),
as many as the pair can contribute: the row's j-th best tile (0-based) has j better
tiles ahead of it, each holding a z that ranks above all of its own (a larger one, or an
equal one with a lower id), so k - j at most.
Pair j's slots are at j k - j (j - 1) / 2 of the row's k (k + 1) / 2 candidates; unused
slots hold (-inf, V): k runs, each in the contract's order, which merge_runs.py merges
into the row's top k.

A pair whose tile is known to hold one z >= thr (its second maximum below thr: a code
past the tiles, merge_topk.best_tiles) is not recomputed: it sorts with the unfilled
slots, past the tiles, and its program writes the tile's maximum (the forward kernel's z,
the same bits) and column as its one candidate; where the forward stored exact second
maxima (topk_forward.pack_third), a tile known to hold at most two z >= thr (its third
maximum below thr) writes its maximum and, where it is >= thr, its second.

The logits are the forward kernel's, bit for bit where the MMA instruction and K order
are the same (the 16-bit tile: both m64n256k16 steps over the same BLOCK_K), and do not
depend on which rows share a program (the MMA's rows are independent), so the values are
batch invariant as the forward's statistics are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..topk_merge import PAD_ID
from ._tiles import load_tile, mixed_dot, round_logits
from .launch import (cdiv, dot_precision, interpreting, inv_t_args, launch, next_power_of_2,
                     tile_source, upcast_dot)
from .merge_runs import merge_runs
from .merge_topk import (CODE_AT_MASK, CODE_ID_BITS, CODE_ID_MASK, CODE_SECOND_SHIFT,
                         NO_SECOND_BITS)
from .tile_sort import sort_tiles

# Pairs a program: the MMA's rows. Fixed, whatever N: the values must not depend on the
# batch. 128 (8 warps, 3 stages) against 64 on one H200: the rescan's kernel time 1.62 /
# 1.88 ms at 8192 tokens, k = 32, 5.87 / 6.58 ms at 32768
# (docs/h200/distill_i20/rescan_88f7fb6/rescan_variants.txt). The interpreter: fewer.
RESCAN_ROWS = 128
# Where the forward stored the tiles' second maxima (topk_forward._second_max: k >= 32, and
# k >= 8 in small calls; exact at k >= 16 up to 2048 rows) most pairs are known maxima
# and the few recomputed ones spread over every tile (0.92 a row at 8192 tokens, k = 32,
# over all 594 tiles, with pack_second's rounded second maxima): a program's MMA is mostly
# empty rows.
# 64 rows at 8 warps: 0.70 / 0.62 ms against 0.79 / 0.74 at 128 rows, 8192 / 16384 tokens,
# k = 32 (sort, rescan and merge; the same bits; docs/h200/pass11/r1/rescan_sweep.txt);
# at k = 8 with every pair recomputed (the dense path) 128 stays ahead, 0.57 against 0.67.
RESCAN_ROWS_SPARSE = 64
RESCAN_ROWS_INTERPRETED = 16
# 8 warps (4: 2.01 / 8.16 ms in the same runs).
RESCAN_WARPS = 8
# at most the forward's (mixed operands: 2, for both halves of the fp32 one in shared memory)
RESCAN_STAGES = 3
# Where few recomputed segments take the rescan's time (small calls: ~42 us at 256
# tokens, ~15 segments at k = 8 by docs/cpu/topk_recomputed_tiles.txt), each is a loop of
# H / BLOCK_K steps on one multiprocessor, and a step waits on its loads.
# RESCAN_STAGES_SPARSE: the sparse path's pipeline stages (None: as the dense path's,
# RESCAN_STAGES capped by the forward's; 16-bit operands of one dtype only). A stage holds
# the weight's 32 KB tile and the gathered hidden rows' 8 KB (both staged: TMA and
# cp.async, compiled for sm_90a with the launch's divisibility of the row stride, which
# docs/h200/pass25/aot_sm90.txt's compile left out, so that it showed the gather as plain
# loads): 205 KB at 5 stages, 246 at 6, past the 227 KB a block may use. Measured on one
# H100, the same bits (H = 4096, V = 151936, bf16): 4 (pass 27) against 3, the rescan 41.9
# -> 34.4 us at 256 tokens, k = 8 (40.9 -> 32.0 at k = 32), 63.8 -> 57.8 at 1024 tokens, k
# = 8, 0.61-0.63 ms either way at 8192 tokens, k = 32; 5 (pass 29, r1,
# docs/h200/pass29/tail_sweep.py) against 4, 58.3 -> 54.1 us at 1024 tokens, k = 8, 50.8
# -> 46.3 at k = 32, at 256 tokens and at 8192 (k = 32) within the run's drift (31.7-37.1
# us at 256 tokens, k = 8, whatever the setting).
# RESCAN_PREFETCH, an A/B setting, off: True loads the next step's rows during this step's
# MMA by hand (the same operands, the same bits). Measured with it (pass 27): slower at
# 256 tokens (34.4 -> 45.3 us at k = 8 with 4 stages), faster at 1024 (57.8 -> 53.8).
RESCAN_STAGES_SPARSE = 5
RESCAN_PREFETCH = False
# The rescan's memory a launch: its candidates (8 bytes each, k (k + 1) / 2 a row) and the
# sorted pairs (8 bytes each, k a row): row blocks past its budget, which is what the
# forward's other buffers (the statistics' chunks, the tile lists: ``alive_bytes``) leave
# of FORWARD_EXTRA_BYTES, and at least RESCAN_BUDGET_BYTES. The target is 64 MiB
# beyond the outputs for the whole forward (measured: docs/BENCHMARKS.md). Larger blocks
# run faster: a tile's pairs share programs (at 8192 tokens, k = 32 one block took the
# rescan 1.6 ms where three took 2.9).
FORWARD_EXTRA_BYTES = 60 << 20
RESCAN_BUDGET_BYTES = 16 << 20


def rescan_row_bytes(k: int) -> int:
    """The rescan's memory a row of a launch (its candidates and sorted pairs)."""
    return 8 * (k * (k + 1) // 2) + 8 * k


def rescan_block_rows(k: int, alive_bytes: int) -> int:
    """Rows a rescan launch takes beside ``alive_bytes`` of the caller's buffers."""
    budget = max(RESCAN_BUDGET_BYTES, FORWARD_EXTRA_BYTES - alive_bytes)
    return max(1, budget // rescan_row_bytes(k))


@triton.jit
def rank_scale(inv_t):
    """What the top-k ranks a row's logits by: z = logit * inv_t, the values it returns,
    whose order is the contract's (descending z, ties to the lower id). Not the raw logits:
    rounding keeps their order but may give two distinct logits one z (fp32 logits a few
    ulps apart, T != 1), which then tie and go to the lower id. Where inv_t is NaN (an
    invalid temperature: the row's values come out NaN) 1, so that the row still ranks
    its logits and its ids are real ones."""
    return tl.where(inv_t == inv_t, inv_t, 1.0)


@triton.jit
def _gather_rows(h_ptr, rows, k0, H, stride_h, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    cols = k0 + tl.arange(0, BLOCK_K)
    ptrs = h_ptr + rows[:, None].to(tl.int64) * stride_h + cols[None, :]
    return tl.load(ptrs, mask=cols[None, :] < H, other=0.0)


@triton.jit
def _columns(BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, OPAQUE: tl.constexpr):
    """[BLOCK_R, BLOCK_V] column positions 0..BLOCK_V-1. ``OPAQUE`` (compiled kernels):
    through an inline-asm copy the compiler cannot hoist, so the positions are rebuilt in
    each round instead of held in registers beside the accumulator across the loops (which
    made ptxas spill). The interpreter runs no inline asm."""
    idx = tl.arange(0, BLOCK_V)[None, :] + tl.zeros([BLOCK_R, BLOCK_V], tl.int32)
    if OPAQUE:
        idx = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [idx], dtype=tl.int32,
                                        is_pure=False, pack=1)
    return idx


@triton.jit
def rescan_kernel(
    h_ptr, h_lo_ptr, w_src, w_lo_src, runs_ptr, pairs_ptr, tile_v_ptr, tile_i_ptr, inv_t_ptr,
    out_v_ptr, out_i_ptr, V, H, K, stride_h, stride_w, inv_t,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, KP: tl.constexpr,
    NB: tl.constexpr, USE_TMA: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr, ROW_INV_T: tl.constexpr, LOGITS_DTYPE: tl.constexpr,
    LO: tl.constexpr, OPAQUE_COLUMNS: tl.constexpr, PAD: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """``runs_ptr`` [2, NB] int32: tile_sort's segments table; ``pairs_ptr`` [P] int32: the
    pairs ordered by tile, each one's row * K + place; ``tile_v_ptr`` [N, K]: the rows'
    candidate tiles' maxima of z, descending (the last is thr); ``tile_i_ptr`` [N, K]
    int64: their tiles or codes (merge_topk.best_tiles), read for the pairs sorted past
    the tiles. The logits are compared as z (times ``rank_scale`` of the row's inv_t);
    a row whose inv_t is NaN stores NaN values. The grid may hold more programs than
    segments (it is sized on the host without the data): those past the last segment do
    nothing."""
    seg = tl.program_id(0)
    num_t = tl.cdiv(V, BLOCK_V)
    bins = tl.arange(0, NB)
    seg_end = tl.load(runs_ptr + bins)
    tile = tl.sum((seg_end <= seg).to(tl.int32), axis=0)  # the first bin ending past seg
    if tile <= num_t:
        run_start = tl.load(runs_ptr + NB + bins)
        seg_begin = tl.max(tl.where(bins < tile, seg_end, 0), axis=0)
        start = tl.sum(tl.where(bins == tile, run_start, 0), axis=0)
        end = tl.sum(tl.where(bins == tile + 1, run_start, 0), axis=0)
        pos = start + (seg - seg_begin) * BLOCK_R + tl.arange(0, BLOCK_R)
        live = pos < end
        pair = tl.load(pairs_ptr + pos, mask=live, other=0).to(tl.int64)
        row = pair // K
        place = (pair % K).to(tl.int32)
        room = K - place  # slots the pair may fill
        base = row * (K * (K + 1) // 2) + place * K - place * (place - 1) // 2
        slots = tl.arange(0, KP)
        inv_t_row = inv_t + tl.zeros([BLOCK_R], tl.float32)
        if ROW_INV_T:
            inv_t_row = tl.load(inv_t_ptr + row, mask=live, other=1.0)
        nan_row = inv_t_row != inv_t_row  # its values: NaN
        rank = rank_scale(inv_t_row)
        if tile < num_t:
            thr = tl.load(tile_v_ptr + row * K + K - 1, mask=live, other=float("inf"))
            col = tl.arange(0, BLOCK_V)
            v0 = (tile * BLOCK_V).to(tl.int32)
            acc = tl.zeros((BLOCK_R, BLOCK_V), tl.float32)
            if PREFETCH:
                a_next = _gather_rows(h_ptr, row, 0, H, stride_h, BLOCK_R, BLOCK_K)
            for k0 in range(0, H, BLOCK_K):
                b = load_tile(w_src, v0, k0, V, H, stride_w, BLOCK_V, BLOCK_K, USE_TMA)
                if PREFETCH:  # the next step's rows in flight during this one's MMA (the
                    a = a_next  # last step's next: past H, no reads)
                    a_next = _gather_rows(h_ptr, row, k0 + BLOCK_K, H, stride_h, BLOCK_R,
                                          BLOCK_K)
                else:
                    a = _gather_rows(h_ptr, row, k0, H, stride_h, BLOCK_R, BLOCK_K)
                a_lo, b_lo = a, b
                if LO == 1:
                    a_lo = _gather_rows(h_lo_ptr, row, k0, H, stride_h, BLOCK_R, BLOCK_K)
                elif LO == 2:
                    b_lo = load_tile(w_lo_src, v0, k0, V, H, stride_w, BLOCK_V, BLOCK_K,
                                     USE_TMA)
                acc = mixed_dot(a, a_lo, b, b_lo, acc, LO, DOT_PRECISION, UPCAST_DOT)
            acc = round_logits(acc, LOGITS_DTYPE) * rank[:, None]  # z, as thr is
            real = (v0 + col)[None, :] < V
            acc = tl.where(real, acc, float("-inf"))
            count = tl.sum(((acc >= thr[:, None]) & real).to(tl.int32), axis=1)
            take = tl.where(live, tl.minimum(count, room), 0)
            for r in range(0, tl.max(take, axis=0)):
                best, at = tl.max(acc, axis=1, return_indices=True,
                                  return_indices_tie_break_left=True)
                keep = r < take
                tl.store(out_v_ptr + base + r, tl.where(nan_row, float("nan"), best),
                         mask=keep)
                tl.store(out_i_ptr + base + r, v0 + at, mask=keep)
                idx = _columns(BLOCK_R, BLOCK_V, OPAQUE_COLUMNS)
                acc = tl.where(idx == at[:, None], float("-inf"), acc)
        else:  # no tile to recompute: known maxima (a code past num_t) or an unfilled slot
            code = tl.load(tile_i_ptr + row * K + place, mask=live, other=-1)
            known = live & (code > num_t) & (code < PAD)
            code = code - num_t - 1  # merge_topk.CODE_ID_BITS: the fields
            id1 = (code & CODE_ID_MASK).to(tl.int32)
            known = known & (id1 < V)
            z = tl.load(tile_v_ptr + row * K + place, mask=known, other=0.0)
            # the tile's second maximum and its column where the code holds one (its
            # third below thr), else -inf; taken where it is >= thr too, as a recomputed
            # tile's would be (a padded column never)
            z2 = (((code >> CODE_SECOND_SHIFT) & 0xFFFFFFFF).to(tl.uint32)
                  .to(tl.int32, bitcast=True) ^ NO_SECOND_BITS).to(tl.float32, bitcast=True)
            at2 = ((code >> CODE_ID_BITS) & CODE_AT_MASK).to(tl.int32)
            id2 = id1 - id1 % BLOCK_V + at2
            thr = tl.load(tile_v_ptr + row * K + K - 1, mask=known, other=float("inf"))
            second = known & (z2 >= thr) & (id2 < V)
            two = second & (room >= 2)
            # the contract's order: z descending, equal z (distinct logits that z rounds
            # together) to the lower id, which goes first also where the pair has one slot
            swap = second & (z2 == z) & (id2 < id1)
            z_a, id_a = tl.where(swap, z2, z), tl.where(swap, id2, id1)
            z_b, id_b = tl.where(swap, z, z2), tl.where(swap, id1, id2)
            tl.store(out_v_ptr + base, tl.where(nan_row, float("nan"), z_a), mask=known)
            tl.store(out_i_ptr + base, id_a, mask=known)
            tl.store(out_v_ptr + base + 1, tl.where(nan_row, float("nan"), z_b), mask=two)
            tl.store(out_i_ptr + base + 1, id_b, mask=two)
            take = known.to(tl.int32) + two.to(tl.int32)
        rest = live[:, None] & (slots[None, :] >= take[:, None]) \
            & (slots[None, :] < room[:, None])
        tl.store(out_v_ptr + base[:, None] + slots[None, :], float("-inf"), mask=rest)
        tl.store(out_i_ptr + base[:, None] + slots[None, :], V, mask=rest)


def rescan_topk(h_parts, w_parts, tile_v: torch.Tensor, tile_i: torch.Tensor,
                inv_temperature, cfg, tma: bool, lo: int, mma: torch.dtype, rounding,
                alive_bytes: int = 0, sparse: bool = False, fin=None):
    """([N, k] values, int64 ids): the rows' top k from their k candidate tiles (``tile_v``
    maxima of z descending, ``tile_i`` tile ids, topk_merge.PAD_ID where unfilled), in row
    blocks within what ``alive_bytes`` (the caller's buffers) leave of FORWARD_EXTRA_BYTES,
    at least RESCAN_BUDGET_BYTES. ``h_parts`` / ``w_parts``: each operand twice, or
    an fp32 operand's hi and lo halves (``lo``: launch.lo_operand; ``mma``: launch.mma_dtype).
    ``sparse``: ``tile_i`` holds known maxima's codes (the forward's second maxima), so few
    pairs are recomputed (RESCAN_ROWS_SPARSE). ``fin`` (finalize_stats.Finalizing): where
    one launch takes every row, finalize's outputs from merge_runs' launch (the values
    then log-probs): (values, ids, finalize's outputs or None)."""
    n_rows, k = tile_v.shape
    dev = tile_v.device
    values = torch.empty(n_rows, k, dtype=torch.float32, device=dev)
    ids = torch.empty(n_rows, k, dtype=torch.int64, device=dev)
    block = rescan_block_rows(k, alive_bytes)
    if n_rows <= block:  # one launch: no row slices (each view costs host time)
        finalized = _rescan(h_parts, w_parts, tile_v, tile_i, inv_temperature, cfg, tma, lo,
                            mma, rounding, (values, ids), sparse, fin)
        return values, ids, finalized
    per_row_t = isinstance(inv_temperature, torch.Tensor)
    for r0 in range(0, n_rows, block):
        rows = slice(r0, r0 + block)
        _rescan((h_parts[0][rows], h_parts[1][rows]), w_parts, tile_v[rows], tile_i[rows],
                inv_temperature[rows] if per_row_t else inv_temperature, cfg, tma, lo, mma,
                rounding, (values[rows], ids[rows]), sparse)
    return values, ids, None


def _rescan(h_parts, w_parts, tile_v, tile_i, inv_temperature, cfg, tma, lo, mma, rounding,
            out, sparse=False, fin=None):
    (h_hi, h_lo), (w_hi, w_lo) = h_parts, w_parts
    n_rows, k = tile_v.shape
    vocab, hidden_size = w_hi.shape
    dev = h_hi.device
    width = k * (k + 1) // 2
    num_t = cdiv(vocab, cfg.block_v)
    rows = RESCAN_ROWS_INTERPRETED if interpreting() else \
        RESCAN_ROWS_SPARSE if sparse else RESCAN_ROWS
    _tiles, pairs, runs = sort_tiles(tile_i, num_t, rows)
    cand_v = torch.empty(n_rows, width, dtype=torch.float32, device=dev)
    cand_i = torch.empty(n_rows, width, dtype=torch.int32, device=dev)
    w_src = tile_source(w_hi, [cfg.block_v, cfg.block_k], tma)
    inv_t_rows, inv_t = inv_t_args(inv_temperature)
    # segments: at most one a tile (the unfilled slots' bin num_t among them) more than
    # the pairs fill
    launch(rescan_kernel, (cdiv(n_rows * k, rows) + num_t + 1,),
        h_hi, h_lo, w_src, tile_source(w_lo, [cfg.block_v, cfg.block_k], tma) if lo == 2
        else None, runs, pairs, tile_v, tile_i, tile_v if inv_t_rows is None else inv_t_rows,
        cand_v, cand_i, vocab, hidden_size, k, h_hi.stride(0), w_hi.stride(0),
        inv_t, BLOCK_R=rows, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
        KP=next_power_of_2(k), NB=runs.shape[1], USE_TMA=tma, DOT_PRECISION=dot_precision(mma),
        UPCAST_DOT=upcast_dot(mma), ROW_INV_T=inv_t_rows is not None,
        LOGITS_DTYPE=rounding, LO=lo, OPAQUE_COLUMNS=not interpreting(), PAD=PAD_ID,
        PREFETCH=RESCAN_PREFETCH,
        num_warps=RESCAN_WARPS, num_stages=_stages(sparse, lo, mma, cfg))
    return merge_runs(cand_v, cand_i, vocab, k, out, fin)


def _stages(sparse: bool, lo: int, mma: torch.dtype, cfg) -> int:
    """The rescan's pipeline stages (RESCAN_STAGES, RESCAN_STAGES_SPARSE)."""
    if RESCAN_STAGES_SPARSE and sparse and not lo and mma != torch.float32:
        return RESCAN_STAGES_SPARSE
    return min(RESCAN_STAGES, cfg.num_stages)
