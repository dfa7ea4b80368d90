"""Merge per-split candidate lists [S, N, W] into each row's ordered best k [N, k] (k <= S W).

The top-k forward merges each row's vocab tiles by their maxima here (``best_tiles``: the
forward kernel's [tiles, N] maxima, a candidate a tile, its id the tile's index), and k =
1 its splits' argmaxima ([S, N, 1]); the rescan's candidates go to merge_runs.py.

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

From k = SELECT_MIN_K, best_tiles selects instead (``select_tiles_kernel``): the same keys,
the k-th largest found bit by bit, whose cost does not grow with k.
"""

import torch
import triton
import triton.language as tl

from ..topk_merge import PAD_ID
from .finalize_stats import Finalizing, finalize_outputs, finalize_rows
from .launch import cdiv, launch, next_power_of_2

# Candidates a program holds: rows per program = this // the candidates a row has (>= 1).
MERGE_TOPK_ELEMENTS = 4096
# best_tiles picks by selection (select_tiles_kernel) from this k, chosen by compiled
# instruction counts (docs/h200/pass10_cpu, 594 tiles a row, 8 rows and 8 warps a
# program): a row's selection ~6800 warp instructions whatever k, k extractions ~430 each
# (6900 at k = 16, 13800 at k = 32). Timed on one H200 at k = 32 and 64 only
# (docs/h200/pass10/r1, r4); k between 16 and 32 not timed.
SELECT_MIN_K = 24
# Rows a program and warps: 2 rows of 1024 tiles at 2 warps (~32 keys a thread; wider
# rows: one row, up to 8 warps). Timed on one H200 (8192 rows, 594 tiles, k = 32:
# docs/h200/pass10/r4): 0.105 ms against 0.186 at 8 rows and 8 warps, 0.11-0.15 for
# 1-16 rows at 2-8 warps; each program's 31 counts are reductions across its warps.
SELECT_ROWS = 2
SELECT_ELEMENTS = 2048
SELECT_WARPS = 2  # at least; 32 keys a thread up to 8
# Calls of up to SELECT_SMALL_TOKENS rows: one row a program at 4 warps at least (more
# programs, each row's 31 counts over more threads). Measured on one H100 (pass 29, r1:
# docs/h200/pass29/tail_sweep.py, 594 tiles, k = 32): 11.5 us against 15.3 at 256 tokens;
# at 1024 tokens 20.9 against 17.8, so not there.
SELECT_SMALL_TOKENS = 256
# best_tiles by extractions (k < SELECT_MIN_K): rows a program, 8 where a row has 512
# tiles or more (a tile's 8 maxima one 32-byte sector; more rows for fewer tiles, up to
# MERGE_TOPK_ELEMENTS a program), and at most one per BEST_TILES_ROW_TOKENS rows of the
# call, rounded down to a power of 2 (more, smaller programs in small calls; 0: off, as
# before pass 29).
# Measured on one H100 (pass 29, r1, 594 tiles, k = 8, us): 1 / 2 / 4 / 8 rows a program
# 7.0 / 7.6 / 11.1 / 15.5 at 256 tokens, - / 14.1 / 13.5 / 16.0 at 1024, - / 76.9 / 62.8
# / 64.9 at 8192 (8 rows at 4 warps spill: 255 registers, compiled for sm_90a).
BEST_TILES_ROW_TOKENS = 256
# The key below every candidate's (-2^63: a real key's high half is a float's, whose
# -inf / NaN are above INT32_MIN): places past a row's candidates, and taken keys.
NONE_KEY = tl.constexpr(-9223372036854775807 - 1)


@triton.jit
def _key32(value):
    """int32 whose signed order is the float order of ``value`` (NaN: as -inf)."""
    value = tl.where(value != value, float("-inf"), value) + 0.0  # -0.0 + 0.0 = +0.0
    bits = value.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _key(value, ids):
    """The int64 keys of candidates (``ids`` < 2^32): descending keys are the contract's
    order (value descending, -0.0 as +0.0, NaN as -inf; equal values to the lower id)."""
    return (_key32(value).to(tl.int64) << 32) | (0xFFFFFFFF - ids.to(tl.int64))


@triton.jit
def _decode(keys, nan_row):
    """(values, ids) of ``keys`` (``_key``): values NaN where ``nan_row`` (broadcast); the
    key below every key (none: past a row's candidates) as -inf and id 2^32 - 1."""
    bits = (keys >> 32).to(tl.int32)
    bits = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    values = tl.where(keys == NONE_KEY, float("-inf"),
                      bits.to(tl.float32, bitcast=True))
    return tl.where(nan_row, float("nan"), values), 0xFFFFFFFF - (keys & 0xFFFFFFFF)


@triton.jit
def merge_topk_kernel(part_v_ptr, part_i_ptr, second_ptr, out_v_ptr, out_i_ptr, N, V, W, K,
                      num_splits, stride_s, stride_r, stride_w, block_v,
                      stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr, valid_ptr,
                      bad_ptr, rec_ptr, num_shards, vocab_size, ignore_index,
                      BLOCK_R: tl.constexpr,
                      WIDTH: tl.constexpr, PAD: tl.constexpr, SLOT_IDS: tl.constexpr,
                      CODES: tl.constexpr, KP: tl.constexpr, FINALIZE: tl.constexpr,
                      HAS_LABELS: tl.constexpr, WITH_ENTROPY: tl.constexpr):
    """Candidate (split, row, slot) at split stride_s + row stride_r + slot stride_w;
    ``SLOT_IDS``: a candidate's id is its slot (``part_i_ptr`` unused). ``CODES``
    (best_tiles with the tiles' second maxima, ``part_i_ptr`` [tiles, N] int32 packed as
    topk_forward.pack_second (1) or pack_third (2, with ``second_ptr`` [tiles, N] fp32)):
    the ids written are rescan codes, ``best_tiles`` says. ``FINALIZE`` (not with CODES):
    the rows' finalize too (finalize_stats.finalize_rows, a record row a program; its
    arguments unused otherwise), the values written as log-probs, z - lse."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    if FINALIZE:
        lse = finalize_rows(stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr,
                            valid_ptr, bad_ptr, rec_ptr, pid, rows, rows < N, N, num_shards,
                            vocab_size, ignore_index, HAS_LABELS, WITH_ENTROPY, BLOCK_R)
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
    keys = _key(values, ids)
    keys = tl.where(live, keys, NONE_KEY)
    out = rows.to(tl.int64) * K
    slots = tl.arange(0, KP)
    chosen = tl.zeros([BLOCK_R, KP], tl.int64)  # CODES: the tiles picked, in order
    thr = tl.full([BLOCK_R], float("-inf"), tl.float32)  # the last value picked
    for i in range(K):
        best = tl.max(keys, axis=1)
        value, key_id = _decode(best, nan_row)
        if FINALIZE:  # finalize_kernel's subtraction
            value = value - lse
        tl.store(out_v_ptr + out + i, value, mask=rows < N)
        if CODES:
            chosen = tl.where(slots[None, :] == i, key_id[:, None], chosen)
            thr = value
        else:
            tl.store(out_i_ptr + out + i, tl.where(key_id < V, key_id, PAD), mask=rows < N)
        keys = tl.where(keys == best[:, None], NONE_KEY, keys)
    if CODES:
        _store_codes(part_i_ptr, second_ptr, out_i_ptr, chosen, thr, rows, out, N, V, K,
                     stride_r, stride_w, block_v, KP, PAD, CODES)


# A known tile's code (best_tiles, read by topk_rescan.py): num_t + 1 + the maximum's id
# (bits 0-22) + the second's column in the tile (bits 23-30) + the second maximum's fp32
# bits xor -inf's (bits 31-62): 0 there is "no second known" (-inf, below every thr), so
# that pack_second's codes are num_t + 1 + the id. Ids stay below 2^21 (at most
# MERGE_TOPK_MAX_CANDIDATES tiles of 256 columns), so the addition carries into no field,
# and a code stays below PAD_ID (2^63 - 1).
CODE_ID_BITS = tl.constexpr(23)
CODE_ID_MASK = tl.constexpr((1 << 23) - 1)
CODE_AT_MASK = tl.constexpr(0xFF)  # the second's column, from bit CODE_ID_BITS
CODE_SECOND_SHIFT = tl.constexpr(31)
NO_SECOND_BITS = tl.constexpr(-8388608)  # 0xFF800000, -inf's bits as an int32


@triton.jit
def _store_codes(packed_ptr, second_ptr, out_i_ptr, chosen, thr, rows, out, N, num_t, K,
                 stride_r, stride_t, block_v, KP: tl.constexpr, PAD: tl.constexpr,
                 CODES: tl.constexpr):
    """best_tiles' rescan codes of the rows' ``chosen`` tiles [BLOCK_R, KP] (>= num_t:
    none), ``thr`` the row's k-th largest maximum. CODES 1 (pack_second): a tile whose
    second maximum lies below thr holds one logit >= thr, its maximum, whose id is then
    known; 2 (pack_third, the exact second maxima at ``second_ptr``): a tile whose third
    maximum lies below thr holds at most two, its maximum and its second, both known. A
    known tile's code: num_t + 1 + the id, the second's column and bits (CODE_ID_BITS);
    any other tile's: its index."""
    slots = tl.arange(0, KP)
    tile = chosen < num_t
    live = (rows < N)[:, None] & (slots < K)[None, :]
    at = chosen * stride_t + rows[:, None].to(tl.int64) * stride_r
    info = tl.load(packed_ptr + at, mask=live & tile, other=0x7F800000)  # +inf: no verdict
    bound = (info & -65536).to(tl.float32, bitcast=True)
    known = bound < thr[:, None]
    if CODES == 2:
        first = info & 0xFF
        second = tl.load(second_ptr + at, mask=live & tile & known, other=float("-inf"))
        field = (second.to(tl.int32, bitcast=True) ^ NO_SECOND_BITS).to(tl.int64) & 0xFFFFFFFF
        extra = (field << CODE_SECOND_SHIFT) \
            | (((info >> 8) & 0xFF).to(tl.int64) << CODE_ID_BITS)
    else:
        first = info & 0xFFFF
        extra = tl.zeros_like(chosen)
    code = tl.where(known, num_t + 1 + chosen * block_v + first + extra, chosen)
    tl.store(out_i_ptr + out[:, None] + slots[None, :], tl.where(tile, code, PAD), mask=live)


@triton.jit
def select_tiles_kernel(tile_max_ptr, packed_ptr, second_ptr, out_v_ptr, out_i_ptr, N, num_t,
                        K, block_v,
                        BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, KP: tl.constexpr,
                        PAD: tl.constexpr, CODES: tl.constexpr):
    """best_tiles by selection (``tile_max`` [num_t, N], WIDTH >= num_t, K): the k-th
    largest key of each row found bit by bit (31 counts of the row's keys at or above a
    candidate; ties at it to the lower tiles), the k chosen tiles' keys written to
    ``out_i`` in tile order, then read back and sorted (k wide) into the contract's order;
    the outputs are merge_topk_kernel's (the same keys), in about half its instructions a
    row at k = 32 (SELECT_MIN_K)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    keep = rows < N
    t = tl.arange(0, WIDTH)
    live = keep[:, None] & (t < num_t)[None, :]
    values = tl.load(tile_max_ptr + t[None, :].to(tl.int64) * N + rows[:, None], mask=live,
                     other=float("-inf"))
    nan_row = tl.max((values != values).to(tl.int32), axis=1) > 0
    lowest = -2147483647 - 1
    k32 = tl.where(live, _key32(values), lowest)  # real keys (even -inf's) lie above
    # the largest thr with at least K keys >= thr: its sign, then its bits high to low
    count = tl.sum((k32 >= 0).to(tl.int32), axis=1)
    thr = tl.where(count >= K, 0, lowest)
    for b in range(31):
        trial = thr | (1 << (30 - b))
        count = tl.sum((k32 >= trial[:, None]).to(tl.int32), axis=1)
        thr = tl.where(count >= K, trial, thr)
    chosen = k32 >= thr[:, None]  # K of them, but where keys tie at thr
    excess = tl.where(keep, tl.sum(chosen.to(tl.int32), axis=1) - K, 0)
    if tl.max(excess, axis=0) > 0:  # of the tied keys, the lower tiles' (a scan: rare)
        above = k32 > thr[:, None]
        tied = k32 == thr[:, None]
        room = K - tl.sum(above.to(tl.int32), axis=1)
        chosen = above | (tied & (tl.cumsum(tied.to(tl.int32), axis=1) <= room[:, None]))
    place = tl.cumsum(chosen.to(tl.int32), axis=1) - 1  # K places, in tile order
    keys = tl.where(live, _key(values, t[None, :]), NONE_KEY)
    out = rows.to(tl.int64) * K
    tl.store(out_i_ptr + out[:, None] + place, keys, mask=chosen & keep[:, None])
    tl.debug_barrier()  # the other threads' stores, read back
    slots = tl.arange(0, KP)
    live = keep[:, None] & (slots < K)[None, :]
    keys = tl.load(out_i_ptr + out[:, None] + slots[None, :], mask=live, other=NONE_KEY)
    tl.debug_barrier()  # every read done before the places are written again
    keys = tl.sort(keys, dim=1, descending=True)
    value, tile = _decode(keys, nan_row[:, None])  # none: tile 2^32 - 1, past every tile
    tl.store(out_v_ptr + out[:, None] + slots[None, :], value, mask=live)
    if CODES:
        kth = tl.sum(tl.where(slots[None, :] == K - 1, value, 0.0), axis=1)
        _store_codes(packed_ptr, second_ptr, out_i_ptr, tile, kth, rows, out, N, num_t, K, 1,
                     N, block_v, KP, PAD, CODES)
    else:
        tl.store(out_i_ptr + out[:, None] + slots[None, :],
                 tl.where(tile < num_t, tile, PAD), mask=live)


def _launch_merge(part_v, part_i, n_rows, vocab, width_split, splits, k, strides, out,
                  elements, codes=0, block_v=0, second=None, fin=None):
    """``codes`` (1, 2): ``part_i`` is best_tiles' packed second (third) maxima, with
    ``second`` its exact second maxima for 2, the ids written are codes (CODES); else its
    ids, or None: the ids are the slots. ``fin`` (not with codes): the rows' finalize in
    the same launch (merge_topk)."""
    assert not (fin is not None and codes), "best_tiles' codes are not log-probs"
    values, ids = out if out is not None else (
        torch.empty(n_rows, k, dtype=torch.float32, device=part_v.device),
        torch.empty(n_rows, k, dtype=torch.int64, device=part_v.device))
    width = next_power_of_2(splits * width_split)
    # a power of 2 (tl.arange's range): best_tiles' elements are rows x width for any rows
    block_r = max(1, min(64, elements // width))
    block_r = 1 << (block_r.bit_length() - 1)
    programs = cdiv(n_rows, block_r)
    finalized, fin_args, fin_flags = finalize_outputs(fin, n_rows, programs, part_v)
    launch(merge_topk_kernel, (programs,),
        part_v, part_v if part_i is None else part_i, part_v if second is None else second,
        values, ids, n_rows, vocab,
        width_split, k, splits, *strides, block_v, *fin_args, BLOCK_R=block_r, WIDTH=width,
        PAD=PAD_ID, SLOT_IDS=bool(codes) or part_i is None, CODES=codes,
        KP=next_power_of_2(k) if codes else 1, **fin_flags,
        num_warps=4 if width <= 1024 else 8)
    return (values, ids) if fin is None else (values, ids, finalized)


def merge_topk(part_v: torch.Tensor, part_i: torch.Tensor, vocab: int, k: int | None = None,
               out: tuple[torch.Tensor, torch.Tensor] | None = None,
               fin: Finalizing | None = None):
    """([N, k] fp32 values, int64 ids) of [S, N, W] per-split lists (int32 ids; >= vocab:
    unfilled), in the contract's order: descending value, ties to the lower id; k: W unless
    given; ``out``: contiguous [N, k] values and ids to write them to. ``fin``: the rows'
    finalize in the same launch: (values as log-probs, ids, finalize's outputs)."""
    splits, n_rows, width_split = part_v.shape
    return _launch_merge(part_v, part_i, n_rows, vocab, width_split, splits,
                         width_split if k is None else k,
                         (n_rows * width_split, width_split, 1), out, MERGE_TOPK_ELEMENTS,
                         fin=fin)


def best_tiles(tile_max: torch.Tensor, k: int, tile_second: torch.Tensor | None = None,
               block_v: int = 0, second_exact: torch.Tensor | None = None):
    """([N, k] fp32 maxima, int64 tile indices): each row's k tiles with the largest maxima
    of ``tile_max`` [tiles, N] (maxima of z, a tile's row contiguous), descending, ties to
    the lower tile; past the tile count (k > tiles): (-inf, PAD_ID).

    ``tile_second`` [tiles, N] int32 (each tile's second maximum, rounded up, and its
    argmax column, as topk_forward.pack_second packs them; tiles of ``block_v`` columns):
    the ids are rescan codes instead: a chosen tile whose second maximum is below the row's
    k-th largest maximum thr holds one logit >= thr, its maximum, whose id is then known,
    and its code is tiles + 1 + that id; any other tile's code is its index, which
    topk_rescan.py recomputes. With ``second_exact`` [tiles, N] fp32 (the tiles' exact
    second maxima of z), ``tile_second`` is packed as topk_forward.pack_third (the third
    maxima rounded up, the two columns): a chosen tile whose third maximum is below thr
    holds at most two logits >= thr, both known, and its code carries the second's column
    and value too (CODE_ID_BITS)."""
    codes = 0 if tile_second is None else 1 if second_exact is None else 2
    num_t, n_rows = tile_max.shape
    if k >= SELECT_MIN_K:
        values = torch.empty(n_rows, k, dtype=torch.float32, device=tile_max.device)
        ids = torch.empty(n_rows, k, dtype=torch.int64, device=tile_max.device)
        width = next_power_of_2(max(num_t, k))
        rows = max(1, min(SELECT_ROWS, SELECT_ELEMENTS // width))
        warps = max(SELECT_WARPS, min(8, rows * width // 1024))
        if n_rows <= SELECT_SMALL_TOKENS:
            rows, warps = 1, max(warps, 4)
        launch(select_tiles_kernel, (cdiv(n_rows, rows),), tile_max,
               tile_max if tile_second is None else tile_second,
               tile_max if second_exact is None else second_exact, values, ids, n_rows, num_t,
               k, block_v, BLOCK_R=rows, WIDTH=width, KP=next_power_of_2(k), PAD=PAD_ID,
               CODES=codes, num_warps=warps)
        return values, ids
    # 8 rows a program from 512 tiles: a tile's 8 maxima are one 32-byte sector
    width = next_power_of_2(num_t)
    elements = max(MERGE_TOPK_ELEMENTS, min(8 * width, 8192))
    if BEST_TILES_ROW_TOKENS:
        elements = min(elements, max(1, n_rows // BEST_TILES_ROW_TOKENS) * width)
    return _launch_merge(tile_max, tile_second, n_rows, num_t, num_t, 1, k, (0, 1, n_rows),
                         None, elements, codes=codes, block_v=block_v, second=second_exact)
