"""The rescan's (row, tile) pairs ordered by tile: a stable counting sort in two launches.

topk_rescan.py recomputes each row's k candidate tiles with the pairs of one tile side by
side (one MMA a tile among a program's pairs), so it reads the pairs ordered by tile, ties
in pair order: what ``torch.sort(stable=True)`` of the tile ids gives, which took ~10
launches a call (8 radix passes over int64 keys, their histogram, scan and memsets) and
~48 bytes of temporaries a pair. The tile ids are small (< 2^13 at V <= 2M and 256-column
tiles), so a counting sort does it in two launches (one where the pairs fit one block) and 8
bytes a pair of int32 output:

  tile_histogram_kernel  each block of SORT_BLOCK pairs counts its tiles ([blocks, NB]
                         int32; an unfilled slot, tile >= the tile count, counts as the
                         tile count: last)
  tile_scatter_kernel    each block places its pairs: those of tile t after every pair of a
                         lower tile and after tile t's pairs of the earlier blocks; inside
                         the block, a tl.sort of (tile, position) keys keeps pair order.
                         Block 0 also writes the runs table (below)

Where one block holds every pair (small calls: 256 tokens at k = 8) and at most
SORT_FEW of them have a tile (the rest known maxima or unfilled slots, which the
forward's second maxima make most of them), the scatter sorts no block: the pairs past
the tiles keep their order after the others (a prefix sum), and the few with a tile,
compacted, are placed by their keys' ranks among themselves (a SORT_FEW x SORT_FEW
compare) instead of by a sort of all BLOCK keys.

The order is torch.sort's (stable) exactly. The rescan's program is one segment: at most
``seg_rows`` consecutive pairs of one tile (one MMA of the tile's weight rows). The runs
table [2, NB] int32 tells a program its segment without the host looking at the data:
runs[0, t] the segments of tiles 0..t (a cumulative sum; tile num_t, the unfilled slots,
has segments too, bins past it none), runs[1, t] the place of tile t's first pair (tile
t's pairs end where tile t + 1's begin; the bins past num_t begin at the pair count).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import cdiv, interpreting, launch, next_power_of_2

# Pairs a block (one program of each kernel, one tl.sort). 2048: the sort of 4096 keys a
# program held tile_scatter_kernel at 83-98 us of CUDA time whatever N (at 256 tokens one
# or two programs); the whole sort_tiles, bursts of 20 calls on one H100 (pass 15 r2:
# docs/h200/pass15/sort_sweep.py; below ~80 us the host's launches set the pace), 2048
# against 4096 keys a block at 2048 to 319488 pairs (256 tokens x k = 8 to a 9984-row
# block x 32): 59-81 against 93-147 us. Smaller blocks, more of them: each scatter program
# reads every block's counts (NB a block), 512 keys 119-127 us at 319488 pairs.
# The interpreter: small blocks, so that the tests cross many of them.
SORT_BLOCK = 2048
SORT_BLOCK_INTERPRETED = 64
SORT_WARPS = 8
# At most this many pairs with a tile in a lone block (a power of 2): ranked without the
# block's sort (above); 0: always sorted. Measured on one H100 (docs/BENCHMARKS.md, pass
# 25: the top-k at 256 tokens, k = 8, ~15 pairs with a tile of 2048 by
# docs/cpu/topk_recomputed_tiles.txt): the scatter 23.6 -> 15.9 us of CUDA time, the same
# bits. The interpreter: fewer, so that the tests cross it.
SORT_FEW = 128
SORT_FEW_INTERPRETED = 8
# rows of the [blocks, NB] counts summed at a time
COUNT_ROWS = 8


@triton.jit
def _block_tiles(tiles_ptr, P, num_t, BLOCK: tl.constexpr):
    """This program's pairs' tiles as int32: unfilled slots (>= num_t) as num_t, positions
    past P as num_t + 1 (counted in a bin nobody reads, sorted after every pair)."""
    pos = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    t = tl.load(tiles_ptr + pos, mask=pos < P, other=0)
    t = tl.minimum(t, num_t).to(tl.int32)
    return tl.where(pos < P, t, num_t + 1)


@triton.jit
def tile_histogram_kernel(tiles_ptr, counts_ptr, P, num_t, BLOCK: tl.constexpr,
                          NB: tl.constexpr):
    """counts[b, t]: the pairs of block b whose tile is t."""
    t = _block_tiles(tiles_ptr, P, num_t, BLOCK)
    bins = tl.arange(0, NB)
    tl.store(counts_ptr + tl.program_id(0) * NB + bins, tl.histogram(t, NB))


@triton.jit
def _place_few(t, n_few, num_t, out_tiles_ptr, out_pairs_ptr, BLOCK: tl.constexpr,
               FEW: tl.constexpr):
    """A lone block's stable order where only ``n_few`` <= FEW of its pairs have a tile
    (t < num_t): those first, by (tile, index), then the rest (t == num_t) in index order;
    the positions past P (num_t + 1) nowhere."""
    idx = tl.arange(0, BLOCK)
    rest = t == num_t
    dest = n_few + tl.cumsum(rest.to(tl.int32), 0) - 1
    tl.store(out_tiles_ptr + dest, t, mask=rest)
    tl.store(out_pairs_ptr + dest, idx, mask=rest)
    # the few, compacted through their own places out_pairs[:n_few], then each placed at
    # its key's rank among them (keys differ: the index is in them)
    few = t < num_t
    tl.store(out_pairs_ptr + tl.cumsum(few.to(tl.int32), 0) - 1, t * BLOCK + idx, mask=few)
    tl.debug_barrier()  # the block's stores seen by its loads
    slot = tl.arange(0, FEW)
    real = slot < n_few
    keys = tl.load(out_pairs_ptr + slot, mask=real, other=2147483647)
    tl.debug_barrier()  # every key loaded before any place is written again
    rank = tl.sum((keys[None, :] < keys[:, None]).to(tl.int32), axis=1)
    tl.store(out_tiles_ptr + rank, keys // BLOCK, mask=real)
    tl.store(out_pairs_ptr + rank, keys % BLOCK, mask=real)


@triton.jit
def _sort_place(t, b, total, earlier, counts_ptr, out_tiles_ptr, out_pairs_ptr, num_t,
                BLOCK: tl.constexpr, NB: tl.constexpr, ONE_BLOCK: tl.constexpr):
    """Block b's pairs placed through a sort of its (tile, index) keys: ``total`` /
    ``earlier`` every block's and the earlier blocks' pairs of each tile (unused where
    ``ONE_BLOCK``)."""
    keys = tl.sort(t * BLOCK + tl.arange(0, BLOCK))
    tile = keys // BLOCK
    dest = tl.arange(0, BLOCK)  # ONE_BLOCK: the sorted position is the place
    if not ONE_BLOCK:
        bins = tl.arange(0, NB)
        mine = tl.load(counts_ptr + b * NB + bins)
        # the place of this block's first pair of tile t, less the block's pairs of lower
        # tiles (which its sorted position counts); 0 for a lone block (mine = total)
        shift = (tl.cumsum(total, 0) - total) + earlier - (tl.cumsum(mine, 0) - mine)
        dest += tl.gather(shift, tile, 0)
    real = tile <= num_t
    tl.store(out_tiles_ptr + dest, tile, mask=real)
    tl.store(out_pairs_ptr + dest, b * BLOCK + keys % BLOCK, mask=real)


@triton.jit
def tile_scatter_kernel(tiles_ptr, counts_ptr, out_tiles_ptr, out_pairs_ptr, runs_ptr, P,
                        num_t, num_blocks, seg_rows, BLOCK: tl.constexpr, NB: tl.constexpr,
                        COUNT_ROWS: tl.constexpr, ONE_BLOCK: tl.constexpr,
                        FEW: tl.constexpr):
    """out_tiles / out_pairs [P] int32: the tiles ascending (num_t: unfilled) and each
    one's pair index, stable; runs [2, NB] (block 0): the segments' table. ``ONE_BLOCK``
    (P <= BLOCK): the block counts its own tiles (no histogram launch; counts unused),
    and where at most ``FEW`` (> 0) pairs have a tile, places them without a sort
    (_place_few)."""
    b = tl.program_id(0)
    bins = tl.arange(0, NB)
    t = _block_tiles(tiles_ptr, P, num_t, BLOCK)
    if ONE_BLOCK:
        total = tl.histogram(t, NB)         # every block's pairs of tile t: this one's
        earlier = total                     # unused
    else:
        total = tl.zeros([NB], tl.int32)    # every block's pairs of tile t
        earlier = tl.zeros([NB], tl.int32)  # the earlier blocks' pairs of tile t
        for r0 in range(0, num_blocks, COUNT_ROWS):
            r = r0 + tl.arange(0, COUNT_ROWS)
            c = tl.load(counts_ptr + r[:, None] * NB + bins[None, :],
                        mask=(r < num_blocks)[:, None], other=0)
            total += tl.sum(c, axis=0)
            earlier += tl.sum(tl.where((r < b)[:, None], c, 0), axis=0)
    if b == 0:
        pairs = tl.where(bins <= num_t, total, 0)  # not the last block's padding
        tl.store(runs_ptr + bins, tl.cumsum((pairs + seg_rows - 1) // seg_rows, 0))
        tl.store(runs_ptr + NB + bins, tl.cumsum(pairs, 0) - pairs)
    if ONE_BLOCK and FEW > 0:
        n_few = tl.sum(tl.where(bins < num_t, total, 0), axis=0)  # the pairs with a tile
        if n_few <= FEW:
            _place_few(t, n_few, num_t, out_tiles_ptr, out_pairs_ptr, BLOCK, FEW)
        else:
            _sort_place(t, b, total, total, counts_ptr, out_tiles_ptr, out_pairs_ptr, num_t,
                        BLOCK, NB, True)
    else:
        _sort_place(t, b, total, earlier, counts_ptr, out_tiles_ptr, out_pairs_ptr, num_t,
                    BLOCK, NB, ONE_BLOCK)


def sort_tiles(tile_ids: torch.Tensor, num_t: int, seg_rows: int = 128, *,
               block: int | None = None, warps: int | None = None, few: int | None = None):
    """(tiles [P] int32 ascending, pairs [P] int32: their indices into ``tile_ids``, runs
    [2, NB] int32: the segments' table above), ties in index order, of the pairs' tile ids
    ``tile_ids`` [P] (int64; >= num_t: an unfilled slot, sorted last as num_t). NB:
    ``segment_bins(num_t)``; segments: at most ``seg_rows`` pairs. ``block`` / ``warps`` /
    ``few`` (tools): the pairs a block, its programs' warps and SORT_FEW (powers of 2)."""
    flat = tile_ids.reshape(-1)
    n_pairs = flat.numel()
    if n_pairs >= 2 ** 31:
        raise ValueError(f"{n_pairs} (row, tile) pairs: the sort's int32 positions take "
                         f"fewer than 2^31; use a smaller rescan row block")
    if block is None:
        block = SORT_BLOCK_INTERPRETED if interpreting() else SORT_BLOCK
    if few is None:
        few = SORT_FEW_INTERPRETED if interpreting() else SORT_FEW
    warps = warps or SORT_WARPS
    nb = segment_bins(num_t)
    num_blocks = cdiv(n_pairs, block)
    dev = flat.device
    out = torch.empty(2 * n_pairs + 2 * nb, dtype=torch.int32, device=dev)
    runs = out[2 * n_pairs:].view(2, nb)
    if n_pairs == 0:
        runs.zero_()
        return out[:0], out[:0], runs
    # one block (small calls: 256 tokens at k = 8): it counts its own tiles, so the
    # histogram's launch and buffer are spared (each launch costs the host ~30-45 us)
    one_block = num_blocks == 1
    counts = out if one_block else torch.empty(num_blocks, nb, dtype=torch.int32, device=dev)
    if not one_block:
        launch(tile_histogram_kernel, (num_blocks,), flat, counts, n_pairs, num_t, BLOCK=block,
               NB=nb, num_warps=warps)
    tiles, pairs = out[:n_pairs], out[n_pairs:2 * n_pairs]
    launch(tile_scatter_kernel, (num_blocks,), flat, counts, tiles, pairs, runs, n_pairs,
           num_t, num_blocks, seg_rows, BLOCK=block, NB=nb, COUNT_ROWS=COUNT_ROWS,
           ONE_BLOCK=one_block, FEW=min(few, block) if one_block else 0, num_warps=warps)
    return tiles, pairs, runs


def segment_bins(num_t: int) -> int:
    """The runs table's bins: the tiles, the unfilled slots' bin num_t and the count bin
    num_t + 1, to a power of two."""
    return next_power_of_2(num_t + 2)
