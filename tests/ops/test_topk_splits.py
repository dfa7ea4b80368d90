"""The top-k kernel's work split on the host (ops/kernels/topk_forward.py), no GPU needed.

Under batch invariance a split must be a whole number of the statistics' chunks (the
log-prob forward's invariant splits, fixed by V and the GPU), or the chunks' statistics
would not line up with the kernel's stores; the partials of one launch must stay within
TOPK_PARTIAL_BUDGET_BYTES. The GPU and interpreter tests check the bits; this checks the
arithmetic over many shapes, GPU sizes and k.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay.ops.kernels import topk_forward  # noqa: E402
from megatron_overlay.ops.kernels.logprob_forward import invariant_chunk_tiles  # noqa: E402

CFG = topk_forward.TOPK_16BIT


@pytest.mark.parametrize("num_sms", [4, 132])
@pytest.mark.parametrize("vocab", [5000, 32000, 151936, 152064])
def test_splits_are_whole_chunks_within_the_budget(vocab, num_sms):
    num_v = math.ceil(vocab / CFG.block_v)
    chunk = invariant_chunk_tiles(num_v, num_sms, CFG)
    chunks = math.ceil(num_v / chunk)
    assert 1 <= chunk <= num_v
    for k in (1, 8, 32, 256):
        fixed, per_split_bytes = topk_forward._partial_bytes(num_v, k, chunk)
        # the chunks, and the tiles' maxima, with their second maxima from
        # SECOND_MAX_MIN_K (k = 1: each split's best)
        tile_bytes = 8 if k >= topk_forward.SECOND_MAX_MIN_K else 4
        assert (fixed, per_split_bytes) == ((16 * chunks, 8) if k == 1
                                            else (16 * chunks + tile_bytes * num_v, 0))
        per_row = fixed + per_split_bytes
        block = max(CFG.block_m, topk_forward.TOPK_PARTIAL_BUDGET_BYTES // per_row
                    // CFG.block_m * CFG.block_m)
        for n in (1, 127, 256, 1000, 8192, 32768, 100_000):
            rows = min(n, block)  # a launch's rows (_topk_range's row blocks)
            splits, per_split = topk_forward._splits(
                math.ceil(rows / CFG.block_m), num_v, rows, num_sms, chunk, fixed,
                per_split_bytes)
            assert per_split % chunk == 0, (vocab, k, n, splits, per_split, chunk)
            assert splits == math.ceil(num_v / per_split)  # no empty split
            partial = rows * (16 * chunks + (8 * splits if k == 1 else tile_bytes * num_v))
            assert partial <= max(topk_forward.TOPK_PARTIAL_BUDGET_BYTES,
                                  rows * per_row), (vocab, k, n, splits)


def test_the_chunk_does_not_depend_on_the_tokens():
    """invariant_chunk_tiles takes no token count; the log-prob forward's invariant splits
    are the same chunks (logprob_forward.forward_splits)."""
    from megatron_overlay.ops.kernels.autotune_configs import FORWARD_16BIT
    from megatron_overlay.ops.kernels.logprob_forward import forward_splits

    num_v = math.ceil(151936 / CFG.block_v)
    chunk = invariant_chunk_tiles(num_v, 132, CFG)
    for n in (1, 256, 8192, 32768):
        splits, per_split, _rows = forward_splits(n, num_v, 132, FORWARD_16BIT)
        assert per_split == chunk and splits == math.ceil(num_v / chunk)


@pytest.mark.parametrize("vocab", [151936, 152064])
def test_tokens_a_launch(vocab):
    """The tiles' maxima (4 bytes a tile and row; 8 with their second maxima) and the
    chunks' statistics of 16384 tokens (8192 with the second maxima) fit the partial budget
    at V ~ 152k, under batch invariance or not: one launch (the row block of _topk_range)."""
    num_v = math.ceil(vocab / CFG.block_v)
    for chunk in (None, invariant_chunk_tiles(num_v, 132, CFG)):
        for k in (1, 8, 32):
            fixed, per_split = topk_forward._partial_bytes(num_v, k, chunk)
            rows = 8192 if k > 1 and topk_forward._second_max(num_v, k) else 16384
            assert topk_forward.TOPK_PARTIAL_BUDGET_BYTES // (fixed + per_split) >= rows
