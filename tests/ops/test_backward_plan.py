"""The backward's vocab chunks (kernels/logprob_backward._vocab_chunk): within the memory
budget, and cut once or twice more only where that fills the recompute kernel's waves."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("triton", reason="the Triton kernels' host code imports Triton")

from megatron_overlay.ops.kernels import autotune_configs  # noqa: E402
from megatron_overlay.ops.kernels.logprob_backward import (CHUNK_COST_WAVES,  # noqa: E402
                                                           MAX_EXTRA_CHUNKS, _vocab_chunk)

H200_SMS = 132
TILE_M, TILE_V = 128, 256


def _bf16_plan(n, hidden, vocab, programs):
    """The chunk width of a bf16 backward with a bf16 d_hidden (its fp32 accumulator beside
    the chunk), as logprob_backward.backward asks for it."""
    rows = min(n, autotune_configs.BACKWARD_BLOCK_TOKENS)
    budget = max(autotune_configs.BACKWARD_EXTRA_BUDGET_BYTES - rows * hidden * 4,
                 autotune_configs.BACKWARD_MIN_CHUNK_BYTES)
    return _vocab_chunk(vocab, rows * 2, TILE_V, budget, math.ceil(rows / TILE_M), programs), \
        budget, rows * 2


def _waves(vocab, width, tiles_m, programs):
    return sum(math.ceil(tiles_m * math.ceil(min(width, vocab - v0) / TILE_V) / programs)
               for v0 in range(0, vocab, width))


def test_the_part_empty_waves_at_16384_tokens_go():
    # the budget's 8 chunks of 75 tiles: 64 x 75 = 4800 tiles, 36.4 waves a launch; 9 of 66
    # tiles: 4224, 32 waves
    width, budget, column = _bf16_plan(16384, 3584, 152064, H200_SMS)
    assert math.ceil(152064 * column / budget) == 8
    assert width == 66 * TILE_V and math.ceil(152064 / width) == 9
    assert _waves(152064, width, 64, H200_SMS) == 9 * 32
    assert _waves(152064, 75 * TILE_V, 64, H200_SMS) == 7 * 37 + 34


@pytest.mark.parametrize("n, hidden, vocab", [(8192, 4096, 151936), (32768, 4096, 151936)])
def test_whole_waves_keep_the_budgets_chunks(n, hidden, vocab):
    width, budget, column = _bf16_plan(n, hidden, vocab, H200_SMS)
    assert width == _bf16_plan(n, hidden, vocab, 0)[0] == 66 * TILE_V  # 9 chunks, 32 waves


def test_without_programs_the_budget_alone_decides():
    width, budget, column = _bf16_plan(16384, 3584, 152064, 0)
    assert width == 75 * TILE_V
    assert _vocab_chunk(1000, 10, 256, 10 ** 9) == 1024  # one chunk of whole tiles


@pytest.mark.parametrize("programs", [132, 78, 4])
def test_any_shape_within_budget_and_no_more_waves(programs):
    for n in (256, 1000, 4096, 8192, 20000):
        for hidden in (2048, 4096, 8192):
            for vocab in (32000, 50257, 128256, 151936, 152064, 256000):
                width, budget, column = _bf16_plan(n, hidden, vocab, programs)
                least = math.ceil(vocab * column / budget)
                chunks = math.ceil(vocab / width)
                assert width % TILE_V == 0 and width * column <= max(budget, TILE_V * column)
                assert least <= chunks <= least + MAX_EXTRA_CHUNKS
                tiles_m = math.ceil(min(n, autotune_configs.BACKWARD_BLOCK_TOKENS) / TILE_M)
                plain = _bf16_plan(n, hidden, vocab, 0)[0]
                ours = _waves(vocab, width, tiles_m, programs) + CHUNK_COST_WAVES * chunks
                theirs = _waves(vocab, plain, tiles_m, programs) \
                    + CHUNK_COST_WAVES * math.ceil(vocab / plain)
                assert ours <= theirs
