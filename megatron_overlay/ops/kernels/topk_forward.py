"""Top-k forward: the log-prob forward statistics plus each (row, vocab tile)'s maximum, in
one pass.

The same work items as logprob_forward.py (a tile of BLOCK_M tokens x a range of vocab
tiles), on the same 128 x 256 tile: each logits tile is folded into the four statistics
(``_online_stats.fold_max``, shared) with its row maxima, and the same maxima of z (the
logits times the row's inverse temperature: topk_rescan.rank_scale) are stored, [tiles,
N] fp32 (2.4 KB a row at V ~ 152k): one candidate a tile and row, no rounds over the
logits and no per-row list in registers whatever k, so the epilogue is the log-prob
forward's plus one coalesced store.
``merge_topk.best_tiles`` then picks each row's k tiles with the largest maxima (ties to
the lower tile, which holds the lower ids).
k = 1 keeps each tile's argmax column of z instead (the leftmost of equal maxima) in a
one-slot list a row and split: the splits' best is then the answer, and no rescan
follows.

The row's top-k logits all lie in its k best tiles (topk_rescan.py says why), which the
second stage recomputes for the row and takes its top k from (``rescan_topk``). Tiles and
logits are ranked by z, the values returned, not by the raw logits: inv_t > 0 keeps their
order, but rounding may give two distinct logits one z, whose tie goes to the lower id.
From k = SECOND_MAX_MIN_K (32), and from k = 8 in calls of up to 4096 rows
(SECOND_MAX_SMALL_MIN_K, SECOND_MAX_SMALL_TOKENS), the kernel also stores each (row,
tile)'s second largest z, rounded up to bfloat16, and its maximum's column
(``pack_second``, [tiles, N] int32): a chosen tile whose second maximum lies below the
row's k-th best tile maximum thr holds one z >= thr, its maximum, known without
recomputing the tile, so the rescan's MMAs shrink to the other tiles (its time halved at
k = 32 on the benchmark's logits: docs/BENCHMARKS.md, pass 6). Launches of up to
EXACT_SECOND_MAX_TOKENS rows at k >= EXACT_SECOND_MAX_MIN_K (2048 and 16) store the
second maximum exactly with its column, and the
third rounded up (``pack_third``): a chosen tile whose third maximum lies below thr holds
at most two z >= thr, both known, so only tiles of three are recomputed.

The statistics fold and are stored per chunk of ``chunk_tiles`` vocab tiles (a split is
a whole number of chunks): under batch invariance the chunks are the log-prob forward's
invariant splits, which the host also takes as this kernel's splits (_splits), so the
merged statistics do not depend on N (ops/batch_invariance.py); otherwise one chunk a
split. The maxima are exact and the rescan's logits do not depend on N either.

Launch (below the kernels): ``topk_stats``, the top-k stage contract (ops/stages.py): the
split count, the statistics' merge (merge_splits.py), the tiles' pick and the rescan; and
without TP finalize's outputs (``finalize``), in the launch of the last kernel (merge_topk
at k = 1, else merge_runs) where one launch of each takes every row: one launch less a
call (a 256-token call: two kernels at k = 1, five at k = 8, six at k = 32, whose sort
takes two; docs/BENCHMARKS.md, pass 22).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..topk_merge import PAD_ID, order_candidates
from . import autotune_configs, finalize_stats
from ._online_stats import empty_stats, fold_max, label_logit, pad_tile, store_stats, work_item
from ._tiles import mma_step, round_logits
from .autotune_configs import KernelConfig
from .finalize_stats import Finalizing
from .launch import (cdiv, check_device, default_tma, dot_precision, interpreting,
                     inv_t_args, launch, lo_operand, logits_rounding, mma_dtype,
                     rowmajor, sm_count, tile_source, upcast_dot)
from .. import batch_invariance
from .logprob_forward import choose_splits, invariant_chunk_tiles
from .merge_splits import merge_splits
from .merge_topk import best_tiles, merge_topk
from .topk_rescan import rank_scale, rescan_block_rows, rescan_topk
from .split_operand import split_hi_lo_into, split_rows


@triton.jit
def pack_second(acc, acc_max, at, rank):
    """int32: the rows' second largest raw logit of the tile (the maximum again where it is
    tied) times ``rank`` (topk_rescan.rank_scale), rounded up to bfloat16 (its high 16
    bits), and the maximum's column ``at`` (low 16 bits; the leftmost of equal maxima).
    Rounded up, "second < thr" (thr: a maximum times ``rank``) still proves that the tile
    holds one logit whose z is >= thr, its maximum (rounding is monotone: every other z
    is at most second); NaN reads as +inf (no proof)."""
    # the tile without its argmax column: one compare, select and maximum a logit (a
    # count of the ties and a maximum below acc_max took two reductions and ~420 more
    # SASS instructions, at 255 registers: docs/h200/pass10_cpu)
    cols = tl.arange(0, acc.shape[1])[None, :]
    second = tl.max(tl.where(cols == at[:, None], float("-inf"), acc), axis=1) * rank
    second = tl.where((second != second) | (acc_max != acc_max), float("inf"), second)
    return _round_up_bf16(second) | at.to(tl.int32)


@triton.jit
def _round_up_bf16(value):
    """int32: the fp32 ``value`` rounded toward +inf to bfloat16, in the high 16 bits."""
    bits = value.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits + 0xFFFF, bits) & -65536  # toward +inf (sign: truncate)


# pack_third packs each of the two columns in 8 bits: tiles of at most this many columns
PACK_THIRD_MAX_COLUMNS = 256


@triton.jit
def pack_third(acc, acc_max, at, rank):
    """(second, packed): each row's second largest raw logit of the tile times ``rank``,
    exact (z, the bits the rescan computes), and int32: the third largest z, rounded up to
    bfloat16 (high 16 bits; +inf where the row has a NaN among them: no proof), the
    second's column (bits 8-15) and the maximum's ``at`` (bits 0-7; tiles of at most
    PACK_THIRD_MAX_COLUMNS columns). A chosen tile whose third lies below thr holds at
    most two z >= thr, both known. The same logit twice (ties) is the maximum and the
    second, in column order."""
    cols = tl.arange(0, acc.shape[1])[None, :]
    second, at2 = tl.max(tl.where(cols == at[:, None], float("-inf"), acc), axis=1,
                         return_indices=True, return_indices_tie_break_left=True)
    third = tl.max(tl.where((cols == at[:, None]) | (cols == at2[:, None]), float("-inf"),
                            acc), axis=1) * rank
    second = second * rank
    third = tl.where((third != third) | (second != second) | (acc_max != acc_max),
                     float("inf"), third)
    return second, _round_up_bf16(third) | (at2.to(tl.int32) << 8) | at.to(tl.int32)


@triton.jit
def topk_stats_kernel(
    h_src, h_lo_src, w_src, w_lo_src, labels_ptr, part_ptr, top_v_ptr, top_i_ptr, top_s_ptr,
    inv_t_ptr, N, V, H, stride_h, stride_w, inv_t,
    num_splits, tiles_per_split, chunk_tiles, group_m,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    ARGMAX: tl.constexpr, SECOND: tl.constexpr, WITH_ENTROPY: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, ROW_INV_T: tl.constexpr,
    LOGITS_DTYPE: tl.constexpr, LO: tl.constexpr, HAS_LABELS: tl.constexpr,
):
    """``top_v_ptr``: the tiles' maxima of z [tiles, N] (times ``rank_scale`` of the row's
    inv_t: topk_rescan.py); ``SECOND`` 1: ``top_i_ptr`` each (row, tile)'s second maximum
    and argmax [tiles, N] (pack_second); 2: ``top_s_ptr`` the exact second maxima [tiles,
    N] fp32 and ``top_i_ptr`` the third maxima and the two columns (pack_third); 0: both
    unused; ``ARGMAX``
    (k = 1): each split's best z and its id, [splits, N] each. ``LO`` and ``LOGITS_DTYPE`` as
    logprob_forward's kernel: the raw tile is rounded before the statistics and the
    maxima see it."""
    split, m0, rows, labels, inv_t, inv_t_col, v_begin, v_end = work_item(
        labels_ptr, inv_t_ptr, inv_t, N, V, num_splits, tiles_per_split, group_m,
        BLOCK_M, BLOCK_V, ROW_INV_T, HAS_LABELS)
    k_tiles = tl.cdiv(H, BLOCK_K)
    keep = rows < N
    rank, rank_col = rank_scale(inv_t), rank_scale(inv_t_col)  # what the selection ranks
    a_i, s_i, t_i, zl_i = empty_stats(BLOCK_M)
    best_v = tl.full([BLOCK_M], float("-inf"), tl.float32)  # ARGMAX: the split's best z
    best_i = tl.full([BLOCK_M], V, tl.int32)  # V: none yet

    # the statistics fold chunk by chunk (ops/batch_invariance.py), each stored at its end
    for c0 in range(v_begin, v_end, chunk_tiles):
        for vt in range(c0, tl.minimum(c0 + chunk_tiles, v_end)):
            v0 = vt * BLOCK_V
            acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
            for kk in range(0, k_tiles):
                acc = mma_step(h_src, h_lo_src, w_src, w_lo_src, m0, v0, kk * BLOCK_K, N, V,
                               H, stride_h, stride_w, acc, BLOCK_M, BLOCK_V, BLOCK_K, USE_TMA,
                               LO, DOT_PRECISION, UPCAST_DOT)
            acc = round_logits(acc, LOGITS_DTYPE)
            if HAS_LABELS:
                zl_i += label_logit(acc, v0, labels, inv_t, BLOCK_V)
            # rank_col, not inv_t_col: as the log-prob kernel's but where inv_t is NaN,
            # whose padding stays finite too (the row's maxima rank its real logits)
            acc = pad_tile(acc, v0, V, rank_col, BLOCK_V)
            if ARGMAX:  # the leftmost of equal z: ties to the lower id (tiles come in
                # ascending order); z, not the raw logits, which may differ where z ties
                z_top, at = tl.max(acc * rank_col, axis=1, return_indices=True,
                                   return_indices_tie_break_left=True)
                better = z_top > best_v
                best_v = tl.where(better, z_top, best_v)
                best_i = tl.where(better, v0 + at, best_i)
                acc_max = tl.max(acc, axis=1)  # the fold's, in raw units
            elif SECOND:  # the maximum's column, then what each mode packs beside it
                acc_max, at = tl.max(acc, axis=1, return_indices=True,
                                     return_indices_tie_break_left=True)
                # int32 offsets: a launch's maxima stay within the partial budget
                tl.store(top_v_ptr + vt * N + rows, acc_max * rank, mask=keep)
                if SECOND == 1:
                    tl.store(top_i_ptr + vt * N + rows, pack_second(acc, acc_max, at, rank),
                             mask=keep)
                else:
                    second, packed = pack_third(acc, acc_max, at, rank)
                    tl.store(top_s_ptr + vt * N + rows, second, mask=keep)
                    tl.store(top_i_ptr + vt * N + rows, packed, mask=keep)
            else:
                acc_max = tl.max(acc, axis=1)
                tl.store(top_v_ptr + vt * N + rows, acc_max * rank, mask=keep)
            a_i, s_i, t_i = fold_max(acc, acc_max, inv_t, inv_t_col, a_i, s_i, t_i,
                                     WITH_ENTROPY)
        store_stats(part_ptr, c0 // chunk_tiles, rows, N, inv_t, a_i, s_i, t_i, zl_i)
        a_i, s_i, t_i, zl_i = empty_stats(BLOCK_M)

    if ARGMAX:  # z, the answer (a split without tiles keeps -inf and id V: unfilled)
        top = split.to(tl.int64) * N + rows
        tl.store(top_v_ptr + top, tl.where(inv_t == inv_t, best_v, float("nan")), mask=keep)
        tl.store(top_i_ptr + top, best_i, mask=keep)


# ----------------------------------------------------------------------------- launch

# The partials, the tiles' maxima ([tiles, N] fp32: 2.4 KB a row at V ~ 152k, twice that
# with the second maxima, three times with the exact ones (at most 2048 rows); k = 1: the
# splits' argmaxima, [splits, N] values and ids) and the statistics (16 bytes a chunk, 66
# chunks at V ~ 152k under batch invariance; else a split), stay under this, in row blocks
# past it (56 MiB: 16384 tokens in one launch at V ~ 152k, ~10k with the second maxima,
# 7168 with the exact ones; fp32 operands' 64-column tiles, four times as many: 1920 rows
# with the exact ones, which _launch_plan takes only where they add no launch);
# where a row has too many tiles for merge_topk.py the host picks its k tiles a block of
# rows at a time with about MERGE_BUDGET_BYTES of sort temporaries: the forward
# target is <= 64 MiB beyond the outputs (docs/BENCHMARKS.md).
TOPK_PARTIAL_BUDGET_BYTES = 56 << 20
MERGE_BUDGET_BYTES = 12 << 20
# Candidates a row up to which they are ordered in one kernel (merge_topk.py) rather than
# with torch's sorts (order_candidates): wider rows would not fit its registers.
MERGE_TOPK_MAX_CANDIDATES = 8192
# k from which the kernel also stores each (row, tile)'s second maximum and argmax
# (pack_second: 4 more bytes a tile and row, so 8192 tokens a launch, and three more row
# reductions in the epilogue), so that of a row's k tiles only those holding two logits
# >= thr are recomputed (topk_rescan.py). Measured on one H200 (docs/BENCHMARKS.md, pass
# 6): the kernel 5% slower at 8192 tokens; the rescan 0.48x-0.49x at k = 32, 0.69x at
# k = 8 (0.10x at 256 tokens); the whole top-k 0.77x-1.00x the time without at k = 32
# (256 to 32768 tokens), at k = 8 0.66x at 256 tokens but 1.03x-1.05x at 8192 and 16384.
# Rows of more than MERGE_TOPK_MAX_CANDIDATES tiles never (torch's sorts pick their tiles).
SECOND_MAX_MIN_K = 32
# ... and from k = SECOND_MAX_SMALL_MIN_K in ranges of at most SECOND_MAX_SMALL_TOKENS rows
# (a call's rows; fp32 hidden states: a token block of split_operand.split_rows), where
# the dense rescan is most of the time (it recomputes every chosen tile for a few rows a
# tile). Timed at k = 8 and 16 only (9-15 and 17-31 take the same rule untimed). Measured
# on one H100 (docs/BENCHMARKS.md, pass 14: the whole top-k x the GEMM, bursts /
# synchronized, with / without): at k = 8, 256 tokens 1.42 / 1.73 against 2.54 / 2.73,
# 1024 tokens 1.15 / 1.34 against 1.45 / 1.38, 4096 tokens 1.06 / 1.05 against 1.11 /
# 1.07; at k = 16, 4096 tokens 1.05 / 1.04 against 1.20 / 1.05; at 8192 tokens neither
# ahead in both protocols (k = 8: 1.13 / 1.07 against 1.10 / 1.12).
# This makes the path depend on N: allowed because the two paths give the same bits (a
# known maximum is the forward kernel's logit, a recomputed one the rescan's, the same
# MMA instruction over the same K steps: test_second_maxima_change_no_bit, bf16, fp16
# and fp32 on a GPU), so a row's values and ids do not depend on its batch
# (test_topk_is_invariant_across_the_second_maxima_threshold).
SECOND_MAX_SMALL_MIN_K = 8
SECOND_MAX_SMALL_TOKENS = 4096
# Launch ranges of up to EXACT_SECOND_MAX_TOKENS rows, from k = EXACT_SECOND_MAX_MIN_K,
# store each (row, tile)'s second maximum exactly, with its column, and the third maximum
# rounded up (pack_third: 12 bytes a tile and row against pack_second's 8, one more row
# reduction a tile), so that only tiles holding three z >= thr are recomputed. Where few
# rows share each recomputed tile the rescan rereads most of the weight for them. On the
# benchmark's logits (docs/cpu/topk_recomputed_tiles.txt) pack_second leaves 0.9
# recomputed tiles a row at k = 32 and 0.06 at k = 8; pack_third 0.015 and 0. Measured
# on one H100 (docs/BENCHMARKS.md, passes 18 and 19: the whole top-k, exact / rounded,
# bursts / synchronized, bf16; the same bits): k = 32 0.839 / 0.880 at 256 tokens, 0.912 /
# 0.882 at 1024, 0.966 / 0.911 at 2048, 0.993 / 1.003 at 4096 (there the forward kernel
# 6% slower, the rescan 0.28x); k = 16 0.955 / 0.972 at 256, 0.974 / 0.968 at 1024, 0.976 /
# 0.973 at 2048; k = 8 0.978 / 0.978 at 256 tokens, 1.017 / 0.987 at 1024, 1.014 / 1.034
# at 4096. Pass 20: k = 12 0.976 / 0.988 at 256 (k < 16 keeps pack_second), k = 24 0.904 /
# 0.906 and 0.938 / 0.876 at 1024; k = 12 at 1024 and k = 16 at 4096 tokens: their paired
# ratios and their medians over the GEMM disagree (no verdict; pack_second past 2048
# rows). Not timed: k = 9-11, 13-15, 17-23, 25-31, fp32 operands.
EXACT_SECOND_MAX_TOKENS = 2048
EXACT_SECOND_MAX_MIN_K = 16

# The log-prob forward's tile (128 x 256, 8 warps, one work item per multiprocessor): the
# kernel above keeps nothing beside its accumulator and statistics but k = 1's best.
# fp32 inputs: a narrower tile (3xTF32 dots need more registers). Interpreter: tiny tiles.
TOPK_16BIT = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=8)
TOPK_FP32 = KernelConfig(128, 64, 32, num_warps=8, num_stages=3, group_m=8)
# Mixed operands (split_operand.py): the 16-bit tile with the 2 stages that fit either
# operand's halves (autotune_configs.FORWARD_MIXED_WEIGHT).
TOPK_MIXED = KernelConfig(128, 256, 64, num_warps=8, num_stages=2, group_m=8)
# What tools/bench_distill.py --sweep tries.
CANDIDATES = [TOPK_16BIT, KernelConfig(128, 128, 64, num_warps=8, num_stages=3, group_m=8),
              KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=16)]


def _config(dtype: torch.dtype, lo: int) -> KernelConfig:
    """``dtype``: the tensor cores' (launch.mma_dtype); ``lo``: launch.lo_operand."""
    if interpreting():
        return autotune_configs.forward_config(dtype, False, True)
    if lo:
        return TOPK_MIXED
    return TOPK_FP32 if dtype == torch.float32 else TOPK_16BIT


def _splits(num_m: int, num_v: int, n_rows: int, num_sms: int, chunk_tiles: int | None,
            group_m: int, fixed_bytes: int, split_bytes: int) -> tuple[int, int]:
    """(splits, vocab tiles per split): the log-prob forward's (the same work items, the
    same GEMM): under batch invariance one statistics chunk a split (its invariant splits:
    66 of 9 tiles at V ~ 152k on 132 multiprocessors, whatever N), else choose_splits for
    these rows, with no more splits than the partial budget holds: ``fixed_bytes`` a row
    whatever the split count (the chunks' statistics, the tiles' maxima), ``split_bytes``
    a row and split (k = 1's best, the statistics when they are per split):
    _partial_bytes.

    Measured on one H100 (docs/BENCHMARKS.md, pass 14; the whole op, x the GEMM, bursts /
    synchronized): at 8192 tokens k = 1 1.015 / 1.020 against 1.055 / 1.113 with the 2
    splits of 297 tiles the earlier policy chose (one wave of 128 items on 132
    multiprocessors: nearest two waves, an item charged 2 tiles of fixed cost), k = 32
    1.122 / 1.115 against 1.157 / 1.150. Of 2 to 66 splits, 66 was the fastest in bursts
    at each of 8192, 16384 and 32768 tokens and k = 1, 8, 32 timed, and within 1% of the
    fastest synchronized.
    """
    if chunk_tiles:
        return cdiv(num_v, chunk_tiles), chunk_tiles
    splits, per_split = choose_splits(num_m, num_v, n_rows, num_sms, group_m)
    room = TOPK_PARTIAL_BUDGET_BYTES // max(n_rows, 1) - fixed_bytes
    if splits * split_bytes > room:
        per_split = cdiv(num_v, max(1, room // split_bytes))
        splits = cdiv(num_v, per_split)
    return splits, per_split


def topk_stats(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor | None,
               inv_temperature, with_entropy: bool, k: int, *,
               logits_dtype: torch.dtype | None = None, merged: bool = True,
               finalize=None, config: KernelConfig | None = None, use_tma: bool | None = None,
               splits: int | None = None):
    """The top-k stage contract. Mixed operands (split_operand.py): fp32 hidden states are
    split a token block at a time (rows are independent), an fp32 weight a vocab chunk at
    a time (the chunks' statistics merged as splits', their top-k lists as TP shards').
    ``merged=False``: the statistics' chunks [chunks, N, 4] as the kernel wrote them where
    one launch takes every row (one less launch), else [1, N, 4], merged. ``finalize`` (an
    ops/params.py FinalizeRequest): finalize's outputs in place of the statistics, the
    values as log-probs: in the launch of the last kernel (merge_topk at k = 1, else
    merge_runs) where one launch of each kernel takes every row (operands of one dtype:
    mixed fp32 / 16-bit ones launch in blocks), else in finalize's own."""
    fin = None if finalize is None else Finalizing(None, finalize, with_entropy)
    out = _topk_stats(hidden, weight, local_labels, inv_temperature, with_entropy, k,
                      logits_dtype, merged and fin is None, config, use_tma, splits, fin)
    if fin is None:
        return out if merged or out[0].dim() == 3 else (out[0][None], *out[1:])
    first, values, ids = out
    if isinstance(first, torch.Tensor):  # not finalized in one of the stage's kernels
        first = finalize_stats.finalize(first if first.dim() == 3 else first[None],
                                        *finalize[:3], with_entropy,
                                        record_alloc=finalize.record_alloc, values=values)
    return first, values, ids


def _topk_stats(hidden, weight, local_labels, inv_temperature, with_entropy, k, logits_dtype,
                merged, config, use_tma, splits, fin=None):
    check_device(hidden, weight, *([] if local_labels is None else [local_labels]))
    rounding = logits_rounding(logits_dtype)
    n_tokens, hidden_size = hidden.shape
    vocab = weight.shape[0]
    dev = hidden.device
    if n_tokens == 0 or vocab == 0:
        stats = torch.zeros(n_tokens, 4, dtype=torch.float32, device=dev)
        stats[:, 0] = float("-inf")
        return (stats, torch.full((n_tokens, k), float("-inf"), device=dev),
                torch.full((n_tokens, k), PAD_ID, dtype=torch.int64, device=dev))
    hidden, weight = rowmajor(hidden), rowmajor(weight)
    labels = None if local_labels is None else local_labels.contiguous()
    lo, mma = lo_operand(hidden, weight), mma_dtype(hidden, weight)
    if use_tma is None:
        use_tma = default_tma(hidden, weight)
    cfg = config or _config(mma, lo)

    def run(h_parts, w_parts, labels, inv_t, merged=True, fin=None):
        return _topk_range(h_parts, w_parts, labels, inv_t, bool(with_entropy), k, cfg,
                           use_tma, lo, mma, rounding, splits, merged, fin)

    if lo == 1:
        block = split_rows(n_tokens, hidden_size, cfg.block_m)
        halves = torch.empty(2, block, hidden_size, dtype=mma, device=dev)
        per_row = isinstance(inv_temperature, torch.Tensor)
        outs = [run(split_hi_lo_into(hidden[r0:r0 + block], halves), (weight, weight),
                    None if labels is None else labels[r0:r0 + block],
                    inv_temperature[r0:r0 + block] if per_row else inv_temperature)
                for r0 in range(0, n_tokens, block)]
        return tuple(torch.cat(parts) for parts in zip(*outs))
    if lo == 0:
        return run((hidden, hidden), (weight, weight), labels, inv_temperature, merged, fin)
    chunk = split_rows(vocab, hidden_size, cfg.block_v)
    halves = torch.empty(2, chunk, hidden_size, dtype=mma, device=dev)
    per_chunk, values, ids = [], [], []
    for v0 in range(0, vocab, chunk):
        st, va, ix = run((hidden, hidden), split_hi_lo_into(weight[v0:v0 + chunk], halves),
                         labels - v0 if v0 and labels is not None else labels,
                         inv_temperature)
        per_chunk.append(st)
        values.append(va)
        ids.append(torch.where(ix == PAD_ID, ix, ix + v0))
    stats = torch.empty(n_tokens, 4, dtype=torch.float32, device=dev)
    merge_splits(torch.stack(per_chunk), stats, bool(with_entropy))
    values, ids = torch.cat(values, 1), torch.cat(ids, 1)
    top_v, top_i = _best_k(n_tokens, k, values.shape[1], lambda rows: (values[rows], ids[rows]),
                           dev)
    return stats, top_v, top_i


def _best_k(n_tokens, k, width, candidates, dev):
    """([N, k] values, ids): the best k of each row's ``width`` candidates
    (``candidates(rows)`` -> their [rows, width] values and ids), ordered a block of rows at a
    time within MERGE_BUDGET_BYTES (~48 bytes of sort temporaries a candidate)."""
    values = torch.empty(n_tokens, k, dtype=torch.float32, device=dev)
    ids = torch.empty(n_tokens, k, dtype=torch.int64, device=dev)
    step = max(1, MERGE_BUDGET_BYTES // (48 * width))
    for r0 in range(0, n_tokens, step):
        rows = slice(r0, r0 + step)
        values[rows], ids[rows] = order_candidates(*candidates(rows), k)
    return values, ids


def _second_max(num_v: int, k: int, n_rows: int, block_v: int) -> int:
    """What the kernel stores beside the tiles' maxima for a launch range of ``n_rows``
    (the kernel's ``SECOND``): 0 nothing, 1 the second maxima rounded up (pack_second;
    SECOND_MAX_MIN_K, SECOND_MAX_SMALL_MIN_K), 2 the second maxima exactly and the third
    rounded up (pack_third; EXACT_SECOND_MAX_TOKENS, EXACT_SECOND_MAX_MIN_K; tiles of at
    most PACK_THIRD_MAX_COLUMNS: every config of this file is, a ``config`` given to
    topk_stats need not be)."""
    from_k = SECOND_MAX_SMALL_MIN_K if n_rows <= SECOND_MAX_SMALL_TOKENS else SECOND_MAX_MIN_K
    if not (k >= max(2, from_k) and num_v <= MERGE_TOPK_MAX_CANDIDATES):
        return 0
    exact = n_rows <= EXACT_SECOND_MAX_TOKENS and k >= EXACT_SECOND_MAX_MIN_K
    return 2 if exact and block_v <= PACK_THIRD_MAX_COLUMNS else 1


def _partial_bytes(num_v: int, k: int, chunk_tiles: int | None, second: int
                   ) -> tuple[int, int]:
    """A row's partial bytes, (whatever the split count, per split): the statistics (16
    bytes a chunk under batch invariance, else 16 a split) and the tiles' maxima (4 a
    tile; with ``second`` (_second_max) 1: 8, 2: 12; k = 1: a split's best z and id, 8)."""
    fixed, per_split = (0, 16) if chunk_tiles is None else (16 * cdiv(num_v, chunk_tiles), 0)
    if k == 1:
        return fixed, per_split + 8
    return fixed + 4 * (1 + second) * num_v, per_split


def _launch_plan(num_v: int, k: int, chunk_tiles: int, invariant: bool, n_tokens: int,
                 block_m: int, block_v: int):
    """(second maxima stored, _partial_bytes, rows a launch) for a range of ``n_tokens``
    rows: the second maxima decided once for every row block alike (the exact ones only
    where they take no more row blocks than the rounded ones: fp32 operands' narrow tiles
    at 1921-2048 rows keep pack_second); a launch's rows within TOPK_PARTIAL_BUDGET_BYTES
    with room for as many splits as the invariant chunks (``chunk_tiles`` tiles each;
    invariant, they are the splits; else _splits fits choose_splits' count to that room), a
    whole number of token tiles."""
    def plan(second):
        fixed_bytes, split_bytes = _partial_bytes(num_v, k, chunk_tiles if invariant else None,
                                                  second)
        per_row = fixed_bytes + split_bytes * cdiv(num_v, chunk_tiles)
        block = max(block_m, TOPK_PARTIAL_BUDGET_BYTES // per_row // block_m * block_m)
        return second, (fixed_bytes, split_bytes), block

    planned = plan(_second_max(num_v, k, n_tokens, block_v))
    if planned[0] == 2:
        rounded = plan(1)
        if cdiv(n_tokens, planned[2]) > cdiv(n_tokens, rounded[2]):
            return rounded
    return planned


def _topk_range(h_parts, w_parts, labels, inv_temperature, with_entropy, k, cfg, tma, lo,
                mma, rounding, splits, merged=True, fin=None):
    """topk_stats over the rows of ``h_parts`` and the vocab range of ``w_parts`` (each an
    operand twice, or an fp32 operand's hi and lo), in blocks of rows where the partial
    statistics and lists of all the rows would not fit their budget.

    Batch invariance (ops/batch_invariance.py): the statistics are folded and stored per
    chunk of vocab tiles, the chunks those of the log-prob forward (V and the GPU fix them,
    never N: logprob_forward.invariant_chunk_tiles), which are also the splits, and merged
    in chunk order; the top-k values are dot products, the same whatever the split, and
    the same bits with or without the second maxima (_second_max, decided here for the
    range's rows). Off, statistics go per split. ``merged=False``: one
    launch's chunks unmerged (topk_stats). ``fin`` (finalize_stats.Finalizing, its
    statistics unset): finalized in the last kernel where one launch takes every row.
    """
    n_tokens = h_parts[0].shape[0]
    num_v = cdiv(w_parts[0].shape[0], cfg.block_v)
    num_sms = sm_count(h_parts[0].device)
    chunk_tiles = invariant_chunk_tiles(num_v, num_sms, cfg)
    invariant = batch_invariance.enabled()
    second, (fixed_bytes, split_bytes), block = _launch_plan(num_v, k, chunk_tiles, invariant,
                                                             n_tokens, cfg.block_m,
                                                             cfg.block_v)
    chunk_tiles = chunk_tiles if invariant else None
    if n_tokens <= block:
        return _topk_block(h_parts, w_parts, labels, inv_temperature, with_entropy, k, cfg,
                           tma, lo, mma, rounding, splits, chunk_tiles, second,
                           (fixed_bytes, split_bytes), merged, fin)
    per_row_t = isinstance(inv_temperature, torch.Tensor)
    outs = [_topk_block((h_parts[0][r0:r0 + block], h_parts[1][r0:r0 + block]), w_parts,
                        None if labels is None else labels[r0:r0 + block],
                        inv_temperature[r0:r0 + block] if per_row_t else inv_temperature,
                        with_entropy, k, cfg, tma, lo, mma, rounding, splits, chunk_tiles,
                        second, (fixed_bytes, split_bytes))
            for r0 in range(0, n_tokens, block)]
    return tuple(torch.cat(parts) for parts in zip(*outs))


def _topk_block(h_parts, w_parts, labels, inv_temperature, with_entropy, k, cfg, tma, lo,
                mma, rounding, splits, chunk_tiles, second, row_bytes, merged=True, fin=None):
    """One launch of the kernel over all the rows of ``h_parts``; ``chunk_tiles``: the
    statistics' chunk (None: per split); ``second``: the second maxima stored
    (_second_max); ``row_bytes``: _partial_bytes; ``merged=False``: the chunks' [chunks,
    N, 4] statistics unmerged; ``fin``: finalize's outputs in place of the statistics at
    k = 1, and at k > 1 where the rescan takes every row in one launch (else the
    statistics)."""
    (h_hi, h_lo), (w_hi, w_lo) = h_parts, w_parts
    n_tokens, hidden_size = h_hi.shape
    vocab = w_hi.shape[0]
    dev = h_hi.device
    num_m = cdiv(n_tokens, cfg.block_m)
    num_v = cdiv(vocab, cfg.block_v)
    unit = chunk_tiles or 1
    if splits is None:
        splits, per_split = _splits(num_m, num_v, n_tokens, sm_count(dev), chunk_tiles,
                                    cfg.group_m, *row_bytes)
    else:  # tools: a given split count (fewer where the vocab tiles run out)
        per_split = cdiv(cdiv(num_v, max(1, min(splits, num_v))), unit) * unit
        splits = math.ceil(num_v / per_split)
    chunk_tiles = chunk_tiles or per_split
    chunks = cdiv(num_v, chunk_tiles)
    stats = None if chunks > 1 and not merged else \
        torch.empty(n_tokens, 4, dtype=torch.float32, device=dev)
    part = stats if chunks == 1 else torch.empty(chunks, n_tokens, 4, dtype=torch.float32,
                                                 device=dev)
    if k == 1:  # each split's best
        top_v = top_s = torch.empty(splits, n_tokens, 1, dtype=torch.float32, device=dev)
        top_i = torch.empty(splits, n_tokens, 1, dtype=torch.int32, device=dev)
    else:  # each tile's maxima (and second maxima)
        top_v = top_i = top_s = torch.empty(num_v, n_tokens, dtype=torch.float32, device=dev)
        if second:
            top_i = torch.empty(num_v, n_tokens, dtype=torch.int32, device=dev)
        if second == 2:
            top_s = torch.empty(num_v, n_tokens, dtype=torch.float32, device=dev)
    inv_t_rows, inv_t = inv_t_args(inv_temperature)
    h_src = tile_source(h_hi, [cfg.block_m, cfg.block_k], tma)
    w_src = tile_source(w_hi, [cfg.block_v, cfg.block_k], tma)
    launch(topk_stats_kernel, (num_m * splits,),
        h_src, tile_source(h_lo, [cfg.block_m, cfg.block_k], tma) if lo == 1 else None,
        w_src, tile_source(w_lo, [cfg.block_v, cfg.block_k], tma) if lo == 2 else None,
        part if labels is None else labels, part, top_v, top_i, top_s,
        part if inv_t_rows is None else inv_t_rows,
        n_tokens, vocab, hidden_size, h_hi.stride(0), w_hi.stride(0), inv_t,
        splits, per_split, chunk_tiles, cfg.group_m,
        BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
        ARGMAX=k == 1, SECOND=second, WITH_ENTROPY=with_entropy, USE_TMA=tma,
        DOT_PRECISION=dot_precision(mma), UPCAST_DOT=upcast_dot(mma),
        ROW_INV_T=inv_t_rows is not None, LOGITS_DTYPE=rounding, LO=lo,
        HAS_LABELS=labels is not None, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    lists = n_tokens * k * 12  # the rows' k tiles beside the rescan (fp32 and int64)
    if stats is None and k > 1 and (
            cdiv(n_tokens, rescan_block_rows(k, part.numel() * 4 + lists))
            > cdiv(n_tokens, rescan_block_rows(k, 16 * n_tokens + lists))):
        # the chunks left for finalize would cut the rescan into more row blocks than the
        # merged statistics (a block's programs then share fewer pairs of a tile: 9 blocks
        # against 3 at 32768 tokens, k = 32): merge them here (finalize folds one part)
        stats = torch.empty(n_tokens, 4, dtype=torch.float32, device=dev)
    if stats is None:  # unmerged: the chunks, which finalize folds
        stats = part
    elif chunks > 1:
        merge_splits(part, stats, with_entropy)
    del part  # merged: its memory goes to the rescan's row blocks
    if fin is not None:
        fin = fin._replace(stats=stats)
    if k == 1:  # the splits' best z and their ids
        if fin is not None:
            values, ids, finalized = merge_topk(top_v, top_i, vocab, fin=fin)
            return finalized, values, ids
        return (stats, *merge_topk(top_v, top_i, vocab))
    # each row's k best tiles, then its top k within them
    if num_v <= MERGE_TOPK_MAX_CANDIDATES:  # one launch (merge_topk.py)
        tile_v, tile_i = best_tiles(top_v, k, top_i if second else None, cfg.block_v,
                                    top_s if second == 2 else None)
    else:
        tile_ids = torch.arange(num_v, device=dev)

        def candidates(rows):
            maxima = top_v[:, rows].t()
            return maxima, tile_ids.expand(maxima.shape[0], num_v)

        tile_v, tile_i = _best_k(n_tokens, k, num_v, candidates, dev)
    del top_v, top_i, top_s
    values, ids, finalized = rescan_topk(h_parts, w_parts, tile_v, tile_i, inv_temperature,
                                         cfg, tma, lo, mma, rounding,
                                         stats.numel() * 4 + lists, sparse=bool(second),
                                         fin=fin)
    return (stats if finalized is None else finalized), values, ids
