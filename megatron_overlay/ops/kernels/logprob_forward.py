"""Forward statistics: online log-sum-exp of z = (hidden @ W.T) * inv_t over vocab tiles.

(inv_t: one scalar, or one value per token row: ``ROW_INV_T``.)

One program owns one *work item*: a tile of BLOCK_M tokens and a contiguous range of
vocab tiles (a "split"). For each vocab tile it runs the K loop of the GEMM on the tensor
cores (fp32 accumulator), then folds the tile into four per-token running values kept in
registers: the largest raw logit a, and with max z = a inv_t, sum exp(z - max), sum
exp(z - max) (z - max) (entropy only), z[label] (_online_stats.py). The logits tile never
leaves registers. Each item writes (max z, the two sums, z[label]) for its tokens to
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

Precision modes (ops/stages.py): ``LOGITS_DTYPE`` rounds each tile in the epilogue
(``_tiles.round_logits``); ``LO``: an fp32 operand arrives as its 16-bit hi and lo halves
(split_operand.py) and each K step runs two MMAs (``_tiles.mma_step``).

Launch (below the kernel): ``forward_stats``, the stage contract's forward (ops/stages.py):
the split count, row blocks under batch invariance (and the hidden states' halves), the
vocab chunks of an fp32 weight's halves, and the merges of splits and chunks
(merge_splits.py).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .. import batch_invariance
from . import autotune_configs
from ._online_stats import empty_stats, fold_max, label_logit, pad_tile, store_stats, work_item
from ._tiles import mma_step, round_logits
from .autotune_configs import KernelConfig
from .launch import (cdiv, check_device, default_tma, dot_precision, interpreting,
                     inv_t_args, launch, lo_operand, logits_rounding, mma_dtype, rowmajor,
                     sm_count, tile_source, upcast_dot)
from .merge_splits import merge_splits
from .split_operand import split_hi_lo_into, split_rows


@triton.jit
def _fold_tile(acc, v0, labels, V, inv_t, inv_t_col, a_i, s_i, t_i, zl_i,
               BLOCK_V: tl.constexpr, WITH_ENTROPY: tl.constexpr, LOGITS_DTYPE: tl.constexpr,
               HAS_LABELS: tl.constexpr):
    """Fold one [BLOCK_M, BLOCK_V] tile of raw logits ``acc`` (rounded to LOGITS_DTYPE
    first, if given) into the running stats (_online_stats.py: a = the largest raw logit;
    m = max z = a inv_t, s = sum exp(z - m), t = sum exp(z - m) (z - m) (relative to the running
    max, as the stage contract has it), zl = z[label].

    ``inv_t`` / ``inv_t_col``: the same scalar twice, or (per-row temperatures) the rows'
    values as [BLOCK_M] and as [BLOCK_M, 1], for the row sums and for the tile.
    """
    acc = round_logits(acc, LOGITS_DTYPE)
    if HAS_LABELS:
        zl_i += label_logit(acc, v0, labels, inv_t, BLOCK_V)
    acc = pad_tile(acc, v0, V, inv_t_col, BLOCK_V)
    a_i, s_i, t_i = fold_max(acc, tl.max(acc, axis=1), inv_t, inv_t_col, a_i, s_i, t_i,
                             WITH_ENTROPY)
    return a_i, s_i, t_i, zl_i


@triton.jit
def forward_stats_kernel(
    h_src, h_lo_src, w_src, w_lo_src, labels_ptr, part_ptr, inv_t_ptr,
    N, V, H, stride_h, stride_w, inv_t,
    num_splits, tiles_per_split, group_m,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    WITH_ENTROPY: tl.constexpr, USE_TMA: tl.constexpr, LOOP: tl.constexpr,
    WARP_SPEC: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
    ROW_INV_T: tl.constexpr, LOGITS_DTYPE: tl.constexpr, LO: tl.constexpr,
    HAS_LABELS: tl.constexpr,
):
    """``ROW_INV_T``: per-row inverse temperatures at ``inv_t_ptr`` [N] (``inv_t`` unused);
    else the scalar ``inv_t`` for every row (``inv_t_ptr`` unused). ``LOGITS_DTYPE``: None,
    or the 16-bit dtype each logit is rounded to (``_tiles.round_logits``). ``LO``: one
    operand was fp32 and comes as its hi and lo parts (``_tiles.mma_step``; else the
    ``*_lo_src`` are None, never read)."""
    split, m0, rows, labels, inv_t, inv_t_col, v_begin, v_end = work_item(
        labels_ptr, inv_t_ptr, inv_t, N, V, num_splits, tiles_per_split, group_m,
        BLOCK_M, BLOCK_V, ROW_INV_T, HAS_LABELS)
    k_tiles = tl.cdiv(H, BLOCK_K)
    a_i, s_i, t_i, zl_i = empty_stats(BLOCK_M)

    if LOOP == 2:
        acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
        for it in tl.range(0, (v_end - v_begin) * k_tiles, warp_specialize=WARP_SPEC):
            vt = v_begin + it // k_tiles
            kk = it % k_tiles
            acc = mma_step(h_src, h_lo_src, w_src, w_lo_src, m0, vt * BLOCK_V, kk * BLOCK_K,
                           N, V, H, stride_h, stride_w, acc, BLOCK_M, BLOCK_V, BLOCK_K,
                           USE_TMA, LO, DOT_PRECISION, UPCAST_DOT)
            if kk == k_tiles - 1:
                a_i, s_i, t_i, zl_i = _fold_tile(acc, vt * BLOCK_V, labels, V, inv_t, inv_t_col,
                                                  a_i, s_i, t_i, zl_i, BLOCK_V, WITH_ENTROPY,
                                                  LOGITS_DTYPE, HAS_LABELS)
                acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
    else:
        for vt in tl.range(v_begin, v_end, flatten=LOOP == 1):
            v0 = vt * BLOCK_V
            acc = tl.zeros((BLOCK_M, BLOCK_V), tl.float32)
            for kk in tl.range(0, k_tiles, warp_specialize=WARP_SPEC):
                acc = mma_step(h_src, h_lo_src, w_src, w_lo_src, m0, v0, kk * BLOCK_K, N, V, H,
                               stride_h, stride_w, acc, BLOCK_M, BLOCK_V, BLOCK_K, USE_TMA, LO,
                               DOT_PRECISION, UPCAST_DOT)
            a_i, s_i, t_i, zl_i = _fold_tile(acc, v0, labels, V, inv_t, inv_t_col,
                                              a_i, s_i, t_i, zl_i, BLOCK_V, WITH_ENTROPY,
                                              LOGITS_DTYPE, HAS_LABELS)

    store_stats(part_ptr, split, rows, N, inv_t, a_i, s_i, t_i, zl_i)


# ----------------------------------------------------------------------------- launch

@functools.lru_cache(maxsize=4096)
def choose_splits(num_m: int, num_v: int, n_rows: int, num_sms: int, group_m: int):
    """(splits, vocab tiles per split) for the forward grid.

    Maximizes the busy fraction of the last wave over split counts whose partial
    statistics fit PARTIAL_STATS_BUDGET_BYTES, with at least num_sms / group_m splits so one
    wave spans about one group of token tiles (its hidden tiles stay in L2).
    """
    cap = max(1, min(num_v, autotune_configs.PARTIAL_STATS_BUDGET_BYTES // (16 * max(n_rows, 1))))
    low = max(1, min(cap, math.ceil(num_sms / group_m)))
    best = (-1.0, 1, num_v)
    for s in range(low, cap + 1):
        per_split = math.ceil(num_v / s)
        splits = math.ceil(num_v / per_split)  # no empty splits
        waves = math.ceil(num_m * splits / num_sms)
        busy = (num_m * num_v) / (waves * num_sms * per_split)
        if busy > best[0] + 1e-3:
            best = (busy, splits, per_split)
    return best[1], best[2]


def invariant_chunk_tiles(num_v: int, num_sms: int, cfg: KernelConfig) -> int:
    """Vocab tiles per split under batch invariance: chosen for a fixed token count
    (autotune_configs.INVARIANT_SPLIT_TOKENS), so V and the GPU fix it, never N. The top-k
    kernel folds its statistics in chunks of this many tiles (topk_forward.py)."""
    ref = autotune_configs.INVARIANT_SPLIT_TOKENS
    return choose_splits(cdiv(ref, cfg.block_m), num_v, ref, num_sms, cfg.group_m)[1]


def forward_splits(n_tokens: int, num_v: int, num_sms: int, cfg: KernelConfig):
    """(splits, vocab tiles per split, tokens per launch).

    Batch invariant (the default, ops/batch_invariance.py): the splits are chosen for a
    fixed token count (autotune_configs.INVARIANT_SPLIT_TOKENS), so they depend on V and
    the GPU only; the partial statistics' budget is kept by launching on row blocks
    instead (rows never interact). Otherwise: chosen for N (one launch).
    """
    if not batch_invariance.enabled():
        splits, per_split = choose_splits(cdiv(n_tokens, cfg.block_m), num_v, n_tokens,
                                          num_sms, cfg.group_m)
        return splits, per_split, n_tokens
    per_split = invariant_chunk_tiles(num_v, num_sms, cfg)
    splits = cdiv(num_v, per_split)
    rows = autotune_configs.PARTIAL_STATS_BUDGET_BYTES // (16 * splits)
    rows = max(cfg.block_m, rows // cfg.block_m * cfg.block_m)
    return splits, per_split, min(rows, n_tokens)


def forward_stats(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor | None,
                  inv_temperature, with_entropy: bool, *, logits_dtype: torch.dtype | None = None,
                  merged: bool = True, config: KernelConfig | None = None,
                  use_tma: bool | None = None) -> torch.Tensor:
    """The contract's forward. Mixed operands (split_operand.py): an fp32 weight is split
    a vocab chunk at a time (each chunk's statistics merged as the splits' are), fp32
    hidden states a token block at a time. ``merged=False``: the splits' [S, N, 4]
    statistics as the kernel wrote them where the tokens fit one launch (one less launch);
    else [1, N, 4], merged."""
    check_device(hidden, weight, *([] if local_labels is None else [local_labels]))
    rounding = logits_rounding(logits_dtype)
    n_tokens, hidden_size = hidden.shape
    vocab = weight.shape[0]
    if n_tokens == 0 or vocab == 0:
        stats = torch.zeros(n_tokens, 4, dtype=torch.float32, device=hidden.device)
        stats[:, 0] = float("-inf")
        return stats if merged else stats[None]
    hidden, weight = rowmajor(hidden), rowmajor(weight)
    labels = None if local_labels is None else local_labels.contiguous()
    lo, mma = lo_operand(hidden, weight), mma_dtype(hidden, weight)
    if use_tma is None:
        use_tma = default_tma(hidden, weight)
    cfg = config or autotune_configs.forward_config(mma, use_tma, interpreting(), lo)
    launch = _Launch(cfg, use_tma, lo, mma, rounding, bool(with_entropy),
                     inv_t_args(inv_temperature))
    if lo != 2:
        stats = launch.rows(hidden, (weight, weight), labels, merged)
        return stats if merged or stats.dim() == 3 else stats[None]
    stats = torch.empty(n_tokens, 4, dtype=torch.float32, device=hidden.device)  # all written
    chunk = split_rows(vocab, hidden_size, cfg.block_v)
    per_chunk = stats[None] if chunk == vocab else torch.empty(
        cdiv(vocab, chunk), n_tokens, 4, dtype=torch.float32, device=hidden.device)
    w_halves = torch.empty(2, chunk, hidden_size, dtype=mma, device=hidden.device)
    for c, v0 in enumerate(range(0, vocab, chunk)):
        w_parts = split_hi_lo_into(weight[v0:v0 + chunk], w_halves)
        launch.rows(hidden, w_parts, labels - v0 if v0 and labels is not None else labels,
                    True, per_chunk[c])
    if chunk < vocab:
        merge_splits(per_chunk, stats, bool(with_entropy))
    return stats if merged else stats[None]


class _Launch:
    """The kernel's launches over one vocab range, for forward_stats."""

    def __init__(self, cfg, tma, lo, mma, rounding, with_entropy, inv_t_args_):
        self.cfg, self.tma, self.lo, self.mma, self.rounding = cfg, tma, lo, mma, rounding
        self.with_entropy = with_entropy
        self.inv_t_rows, self.inv_t = inv_t_args_

    def rows(self, hidden, w_parts, labels, merged, stats=None):
        """The statistics of the vocab range whose weight is ``w_parts`` (the weight twice,
        or an fp32 weight's hi and lo), over the tokens in row blocks (their splits merged):
        in ``stats`` [N, 4] (allocated when None) and returned; unless not ``merged``, one
        launch takes every row and it has several splits: then its [splits, N, 4], the
        merge not launched."""
        cfg, tma, lo, mma = self.cfg, self.tma, self.lo, self.mma
        n_tokens, hidden_size = hidden.shape
        vocab = w_parts[0].shape[0]
        num_v = cdiv(vocab, cfg.block_v)
        splits, per_split, block_rows = forward_splits(n_tokens, num_v, sm_count(hidden.device),
                                                       cfg)
        h_halves = None
        if lo == 1:  # fp32 hidden states: split a block of rows at a time
            block_rows = min(block_rows, split_rows(n_tokens, hidden_size, cfg.block_m))
            h_halves = torch.empty(2, block_rows, hidden_size, dtype=mma, device=hidden.device)
        one_block = block_rows >= n_tokens  # no slicing: each view costs host time
        part = None if splits == 1 else torch.empty(splits, block_rows, 4, dtype=torch.float32,
                                                    device=hidden.device)
        unmerged = not merged and one_block and part is not None
        if stats is None and not unmerged:
            stats = torch.empty(n_tokens, 4, dtype=torch.float32, device=hidden.device)
        w_src = tile_source(w_parts[0], [cfg.block_v, cfg.block_k], tma)
        # a lo part not in use goes as None: the launcher fills each descriptor it is
        # given (~3 us of host time each), and the kernel's LO branches never read it
        w_lo_src = tile_source(w_parts[1], [cfg.block_v, cfg.block_k], tma) if lo == 2 else None
        for r0 in range(0, n_tokens, block_rows):
            rows = min(block_rows, n_tokens - r0)
            h = hidden if one_block else hidden[r0:r0 + rows]
            h_hi, h_lo = split_hi_lo_into(h, h_halves) if lo == 1 else (h, h)
            h_src = tile_source(h_hi, [cfg.block_m, cfg.block_k], tma)
            h_lo_src = tile_source(h_lo, [cfg.block_m, cfg.block_k], tma) if lo == 1 else None
            # the kernel writes a contiguous [splits, rows, 4] block
            if part is None:
                out = stats if one_block else stats[r0:r0 + rows]
            else:
                out = part if rows == block_rows else \
                    part.view(-1)[:splits * rows * 4].view(splits, rows, 4)
            inv_t_rows = self.inv_t_rows
            if inv_t_rows is not None and not one_block:
                inv_t_rows = inv_t_rows[r0:r0 + rows]
            launch(forward_stats_kernel, (cdiv(rows, cfg.block_m) * splits,),
                h_src, h_lo_src, w_src, w_lo_src,
                out if labels is None else labels if one_block else labels[r0:r0 + rows],
                out, out if inv_t_rows is None else inv_t_rows,
                rows, vocab, hidden_size, h_hi.stride(0), w_parts[0].stride(0), self.inv_t,
                splits, per_split, cfg.group_m,
                BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
                WITH_ENTROPY=self.with_entropy, USE_TMA=tma, LOOP=cfg.loop,
                WARP_SPEC=cfg.warp_specialize, DOT_PRECISION=dot_precision(mma),
                UPCAST_DOT=upcast_dot(mma), ROW_INV_T=inv_t_rows is not None,
                LOGITS_DTYPE=self.rounding, LO=lo, HAS_LABELS=labels is not None,
                num_warps=cfg.num_warps,
                num_stages=cfg.num_stages,
            )
            if part is not None and not unmerged:
                merge_splits(out, stats if one_block else stats[r0:r0 + rows],
                             self.with_entropy)
        return part if unmerged else stats
