"""Merge per-split candidate lists [S, N, W] into each row's ordered best k [N, k] (k <= S W).

The top-k forward merges twice: each row's vocab tiles by their maxima (``best_tiles``:
the forward kernel's [tiles, N] maxima, a candidate a tile, its id the tile's index) and
the rescan's candidates ([1, N, k (k + 1) / 2], topk_rescan.py); k = 1 merges its splits'
argmaxima ([S, N, 1]).

One launch in place of topk_merge.order_candidates' sorts (about twenty small launches of
host work a call). Each candidate becomes one int64 key that orders as the contract does:
the high 32 bits are the value's fp32 bits made monotonic (``key32``: a bigger float, a
bigger signed int; -0.0 counted as +0.0, as a float compare does), the low 32 bits
0xFFFFFFFF - id, so that of equal values the lower id has the bigger key. Keys are
distinct (ids are), and k extractions of the row maximum give the order; each key decodes
back to its value and id. A NaN value (a row whose temperature was invalid: every value
of the row is NaN) is keyed as -inf and written back as NaN, as order_candidates does.

The kernel's unfilled slots (ids >= the shard's vocab, value -inf; the same placeholder
id in several splits) are keyed by their place instead, and come out as (-inf, PAD_ID), as
do the places past a row's candidates where k exceeds them.
"""

import torch
import triton
import triton.language as tl

from ..topk_merge import PAD_ID
from .launch import cdiv, launch, next_power_of_2

# Candidates a program holds: rows per program = this // the candidates a row has (>= 1).
MERGE_TOPK_ELEMENTS = 4096


@triton.jit
def _key32(value):
    """int32 whose signed order is the float order of ``value`` (NaN: as -inf)."""
    value = tl.where(value != value, float("-inf"), value) + 0.0  # -0.0 + 0.0 = +0.0
    bits = value.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _value(key32):
    bits = key32 ^ ((key32 >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def merge_topk_kernel(part_v_ptr, part_i_ptr, out_v_ptr, out_i_ptr, N, V, W, K, num_splits,
                      stride_s, stride_r, stride_w, block_v, BLOCK_R: tl.constexpr,
                      WIDTH: tl.constexpr, PAD: tl.constexpr, SLOT_IDS: tl.constexpr,
                      CODES: tl.constexpr, KP: tl.constexpr):
    """Candidate (split, row, slot) at split stride_s + row stride_r + slot stride_w;
    ``SLOT_IDS``: a candidate's id is its slot (``part_i_ptr`` unused). ``CODES``
    (best_tiles with the tiles' second maxima, ``part_i_ptr`` [tiles, N] int32 packed as
    topk_forward.pack_second): the ids written are rescan codes, ``best_tiles`` says."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    w = tl.arange(0, WIDTH)
    split, slot = w // W, w % W
    live = (rows[:, None] < N) & (split[None, :] < num_splits)
    src = split[None, :].to(tl.int64) * stride_s + rows[:, None].to(tl.int64) * stride_r \
        + slot[None, :].to(tl.int64) * stride_w
    values = tl.load(part_v_ptr + src, mask=live, other=float("-inf"))
    if SLOT_IDS:
        ids = slot[None, :] + tl.zeros([BLOCK_R, WIDTH], tl.int32)
    else:
        ids = tl.load(part_i_ptr + src, mask=live, other=0)
    nan_row = tl.max((values != values).to(tl.int32), axis=1) > 0
    ids = tl.where(ids < V, ids, V + w[None, :])  # unfilled slots: distinct keys too
    keys = (_key32(values).to(tl.int64) << 32) | (0xFFFFFFFF - ids.to(tl.int64))
    none = -9223372036854775807 - 1  # below every key
    keys = tl.where(live, keys, none)
    out = rows.to(tl.int64) * K
    slots = tl.arange(0, KP)
    chosen = tl.zeros([BLOCK_R, KP], tl.int64)  # CODES: the tiles picked, in order
    thr = tl.full([BLOCK_R], float("-inf"), tl.float32)  # the last value picked
    for i in range(K):
        best = tl.max(keys, axis=1)
        key_id = 0xFFFFFFFF - (best & 0xFFFFFFFF)
        value = _value((best >> 32).to(tl.int32))
        value = tl.where(best == none, float("-inf"), value)  # past the row's candidates
        value = tl.where(nan_row, float("nan"), value)
        tl.store(out_v_ptr + out + i, value, mask=rows < N)
        if CODES:
            chosen = tl.where(slots[None, :] == i, key_id[:, None], chosen)
            thr = value
        else:
            tl.store(out_i_ptr + out + i, tl.where(key_id < V, key_id, PAD), mask=rows < N)
        keys = tl.where(keys == best[:, None], none, keys)
    if CODES:  # a tile whose second maximum lies below thr holds one logit >= thr: its max
        tile = chosen < V
        live = (rows < N)[:, None] & (slots < K)[None, :]
        info = tl.load(part_i_ptr + chosen * stride_w + rows[:, None].to(tl.int64) * stride_r,
                       mask=live & tile, other=0x7F800000)  # +inf: no verdict
        second = (info & -65536).to(tl.float32, bitcast=True)
        code = tl.where(second < thr[:, None], V + 1 + chosen * block_v + (info & 0xFFFF),
                        chosen)
        tl.store(out_i_ptr + out[:, None] + slots[None, :], tl.where(tile, code, PAD),
                 mask=live)


def _launch_merge(part_v, part_i, n_rows, vocab, width_split, splits, k, strides, out,
                  elements, codes=False, block_v=0):
    """``codes``: ``part_i`` is best_tiles' packed second maxima, the ids written are codes
    (CODES); else its ids, or None: the ids are the slots."""
    values, ids = out if out is not None else (
        torch.empty(n_rows, k, dtype=torch.float32, device=part_v.device),
        torch.empty(n_rows, k, dtype=torch.int64, device=part_v.device))
    width = next_power_of_2(splits * width_split)
    block_r = max(1, min(64, elements // width))
    launch(merge_topk_kernel, (cdiv(n_rows, block_r),),
        part_v, part_v if part_i is None else part_i, values, ids, n_rows, vocab,
        width_split, k, splits, *strides, block_v, BLOCK_R=block_r, WIDTH=width, PAD=PAD_ID,
        SLOT_IDS=codes or part_i is None, CODES=codes, KP=next_power_of_2(k) if codes else 1,
        num_warps=4 if width <= 1024 else 8)
    return values, ids


def merge_topk(part_v: torch.Tensor, part_i: torch.Tensor, vocab: int, k: int | None = None,
               out: tuple[torch.Tensor, torch.Tensor] | None = None):
    """([N, k] fp32 values, int64 ids) of [S, N, W] per-split lists (int32 ids; >= vocab:
    unfilled), in the contract's order: descending value, ties to the lower id; k: W unless
    given; ``out``: contiguous [N, k] values and ids to write them to."""
    splits, n_rows, width_split = part_v.shape
    return _launch_merge(part_v, part_i, n_rows, vocab, width_split, splits,
                         width_split if k is None else k,
                         (n_rows * width_split, width_split, 1), out, MERGE_TOPK_ELEMENTS)


def best_tiles(tile_max: torch.Tensor, k: int, tile_second: torch.Tensor | None = None,
               block_v: int = 0):
    """([N, k] fp32 maxima, int64 tile indices): each row's k tiles with the largest maxima
    of ``tile_max`` [tiles, N] (maxima of z, a tile's row contiguous), descending, ties to
    the lower tile; past the tile count (k > tiles): (-inf, PAD_ID).

    ``tile_second`` [tiles, N] int32 (each tile's second maximum, rounded up, and its
    argmax column, as topk_forward.pack_second packs them; tiles of ``block_v`` columns):
    the ids are rescan codes instead: a chosen tile whose second maximum is below the row's
    k-th largest maximum thr holds one logit >= thr, its maximum, whose id is then known,
    and its code is tiles + 1 + that id; any other tile's code is its index, which
    topk_rescan.py recomputes."""
    num_t, n_rows = tile_max.shape
    # up to 8 rows a program: a tile's 8 maxima are one 32-byte sector
    return _launch_merge(tile_max, tile_second, n_rows, num_t, num_t, 1, k, (0, 1, n_rows),
                         None, max(MERGE_TOPK_ELEMENTS, min(8 * next_power_of_2(num_t), 8192)),
                         codes=tile_second is not None, block_v=block_v)
