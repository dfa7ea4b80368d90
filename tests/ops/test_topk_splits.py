"""The top-k kernel's work split on the host (ops/kernels/topk_forward.py), no GPU needed.

The top-k kernel takes the log-prob forward's splits (the same work items and GEMM):
under batch invariance one statistics chunk a split (the log-prob forward's invariant
splits, fixed by V and the GPU), so the chunks' statistics line up with the kernel's
stores; otherwise choose_splits for the launch's rows. The partials of one launch must
stay within TOPK_PARTIAL_BUDGET_BYTES. The GPU and interpreter tests check the bits; this
checks the arithmetic over many shapes, GPU sizes and k.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay.ops.kernels import topk_forward  # noqa: E402
from megatron_overlay.ops.kernels.autotune_configs import FORWARD_16BIT  # noqa: E402
from megatron_overlay.ops.kernels.logprob_forward import (choose_splits,  # noqa: E402
                                                          forward_splits,
                                                          invariant_chunk_tiles)

CFG = topk_forward.TOPK_16BIT
TOKENS = (1, 127, 256, 1000, 4096, 4097, 8192, 32768, 100_000)


def _launches(vocab, num_sms, k, n, invariant, monkeypatch):
    """[(rows, splits, per_split, partial bytes, second)] of each launch of a call of n
    tokens: _topk_range itself plans the row blocks (its _topk_block replaced by a recorder
    that runs no kernel and takes the split count as _topk_block does)."""
    launches = []

    def block(h_parts, w_parts, labels, inv_t, with_entropy, k_, cfg, tma, lo, mma, rounding,
              splits, chunk_tiles, second, row_bytes, merged=True, fin=None):
        rows, num_v = h_parts[0].shape[0], math.ceil(w_parts[0].shape[0] / cfg.block_v)
        splits, per_split = topk_forward._splits(math.ceil(rows / cfg.block_m), num_v, rows,
                                                 num_sms, chunk_tiles, cfg.group_m, *row_bytes)
        launches.append((rows, splits, per_split, rows * (row_bytes[0] + row_bytes[1] * splits),
                         second))
        return (torch.zeros(rows, 4), torch.zeros(rows, k_),
                torch.zeros(rows, k_, dtype=torch.int64))

    monkeypatch.setattr(topk_forward, "_topk_block", block)
    monkeypatch.setattr(topk_forward, "sm_count", lambda device: num_sms)
    monkeypatch.setenv("MEGATRON_OVERLAY_BATCH_INVARIANT", "1" if invariant else "0")
    hidden, weight = torch.empty(n, 1), torch.empty(vocab, 1)
    out = topk_forward._topk_range((hidden, hidden), (weight, weight), None, 1.0, False, k, CFG,
                                   False, 0, torch.bfloat16, None, None)
    assert out[0].shape == (n, 4) and out[1].shape == (n, k)  # every row, once
    assert sum(rows for rows, *_ in launches) == n
    return launches


@pytest.mark.parametrize("num_sms", [4, 132])
@pytest.mark.parametrize("vocab", [5000, 32000, 151936, 152064])
def test_invariant_splits_are_the_log_prob_forwards(vocab, num_sms, monkeypatch):
    """Under batch invariance each split is one chunk, whatever N and k: the log-prob
    forward's splits (forward_splits), and every launch's partials within the budget."""
    num_v = math.ceil(vocab / CFG.block_v)
    chunk = invariant_chunk_tiles(num_v, num_sms, CFG)
    for k in (1, 8, 32, 256):
        for n in TOKENS:
            for rows, splits, per_split, partial, _ in _launches(vocab, num_sms, k, n, True,
                                                                 monkeypatch):
                assert (splits, per_split) == forward_splits(n, num_v, num_sms,
                                                             FORWARD_16BIT)[:2]
                assert per_split == chunk and splits == math.ceil(num_v / chunk)
                assert partial <= topk_forward.TOPK_PARTIAL_BUDGET_BYTES, (vocab, k, n)


@pytest.mark.parametrize("num_sms", [4, 132])
@pytest.mark.parametrize("vocab", [5000, 151936])
def test_splits_without_invariance_fit_the_budget(vocab, num_sms, monkeypatch):
    """Not invariant: choose_splits for the launch's rows where the budget holds them
    (fewer splits where k = 1's best a split would not fit), no empty split."""
    num_v = math.ceil(vocab / CFG.block_v)
    for k in (1, 8, 32):
        for n in TOKENS:
            for rows, splits, per_split, partial, _ in _launches(vocab, num_sms, k, n, False,
                                                                 monkeypatch):
                assert splits == math.ceil(num_v / per_split)  # no empty split
                assert partial <= topk_forward.TOPK_PARTIAL_BUDGET_BYTES, (vocab, k, n)
                preferred = choose_splits(math.ceil(rows / CFG.block_m), num_v, rows,
                                          num_sms, CFG.group_m)
                # the launch's rows leave room for the invariant chunks' count of splits
                chunks = math.ceil(num_v / invariant_chunk_tiles(num_v, num_sms, CFG))
                assert splits == preferred[0] or splits >= chunks, (k, n, splits, preferred)


def test_second_maxima_from_k_8_in_small_calls(monkeypatch):
    """SECOND_MAX_SMALL_MIN_K up to SECOND_MAX_SMALL_TOKENS rows a call, SECOND_MAX_MIN_K
    past them; exact (pack_third, 2) up to EXACT_SECOND_MAX_TOKENS rows from k =
    EXACT_SECOND_MAX_MIN_K, else rounded up (pack_second, 1); never past
    MERGE_TOPK_MAX_CANDIDATES tiles; decided once a call, so every row block of a call
    takes the same path and its partial bytes; exact only on tiles of at most 256 columns."""
    num_v = 594
    small, large = topk_forward.SECOND_MAX_SMALL_TOKENS, topk_forward.SECOND_MAX_SMALL_TOKENS + 1
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_TOKENS", small)
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_MIN_K", 8)
    for k, at_small, at_large in ((1, 0, 0), (7, 0, 0), (8, 2, 0), (31, 2, 0), (32, 2, 1),
                                  (256, 2, 1)):
        assert topk_forward._second_max(num_v, k, small, 256) == at_small, k
        assert topk_forward._second_max(num_v, k, large, 256) == at_large, k
        assert topk_forward._second_max(8193, k, 256, 256) == 0
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_TOKENS", 1000)
    assert [topk_forward._second_max(num_v, k, n, 256) for k in (8, 32) for n in (1000, 1001)] \
        == [2, 1, 2, 1]
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_MIN_K", 32)  # k = 8 rounds up
    assert [topk_forward._second_max(num_v, k, n, 256) for k in (8, 31, 32)
            for n in (1000, 1001)] == [1, 1, 1, 1, 2, 1]
    # pack_third packs its columns in 8 bits: wider tiles (a config given to topk_stats)
    # store the second maxima rounded up
    assert [topk_forward._second_max(num_v, 32, 1000, bv) for bv in (64, 256, 512)] \
        == [2, 2, 1]
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_MIN_K", 8)
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_TOKENS", small)
    # a budget of 2100 rows of the path's partial bytes at k = 8: a 4096-row call in two
    # blocks of 2048, both with exact second maxima; 4097 rows in three, all without
    for n, second in ((4096, 2), (4097, 0)):
        per_row = sum(topk_forward._partial_bytes(num_v, 8, 9, second))
        monkeypatch.setattr(topk_forward, "TOPK_PARTIAL_BUDGET_BYTES", 2100 * per_row)
        launches = _launches(151936, 132, 8, n, True, monkeypatch)
        assert [rows for rows, *_ in launches] == [2048, 2048, 1][:len(launches)]
        assert len(launches) == -(-n // 2048) and {s for *_, s in launches} == {second}
        assert all(partial <= topk_forward.TOPK_PARTIAL_BUDGET_BYTES
                   for _, _, _, partial, _ in launches)
    assert topk_forward._partial_bytes(594, 32, 9, 2)[0] == 16 * 66 + 12 * 594
    assert topk_forward._partial_bytes(594, 32, 9, 1)[0] == 16 * 66 + 8 * 594
    assert topk_forward._partial_bytes(594, 8, 9, 0)[0] == 16 * 66 + 4 * 594


def test_the_chunk_does_not_depend_on_the_tokens():
    """invariant_chunk_tiles takes no token count; the log-prob forward's invariant splits
    are the same chunks (logprob_forward.forward_splits)."""
    num_v = math.ceil(151936 / CFG.block_v)
    chunk = invariant_chunk_tiles(num_v, 132, CFG)
    for n in (1, 256, 8192, 32768):
        splits, per_split, _rows = forward_splits(n, num_v, 132, FORWARD_16BIT)
        assert per_split == chunk and splits == math.ceil(num_v / chunk)


@pytest.mark.parametrize("vocab", [151936, 152064])
def test_tokens_a_launch(vocab):
    """The tiles' maxima (4 bytes a tile and row; 8 with their second maxima, 12 exact) and
    the chunks' statistics of 16384 tokens (8192 with the second maxima; 4096 at k = 8,
    where small launches store them; 2048 exact, at k = 16 and 32) fit the partial budget
    at V ~ 152k, under batch invariance or not: one launch (the row block of
    _topk_range)."""
    num_v = math.ceil(vocab / CFG.block_v)
    for chunk in (None, invariant_chunk_tiles(num_v, 132, CFG)):
        for k, n, stored in ((1, 16384, 0), (8, 16384, 0), (8, 4096, 1), (32, 8192, 1),
                             (16, 2048, 2), (32, 2048, 2)):
            second, _, block = topk_forward._launch_plan(
                num_v, k, invariant_chunk_tiles(num_v, 132, CFG), chunk is not None, n,
                CFG.block_m, CFG.block_v)
            assert block >= n and second == stored, (k, n, chunk)
    # fp32 operands' 64-column tiles: the exact second maxima's 12 bytes a tile fit 1920
    # rows a launch; they are taken only where they add no launch (the rounded ones fit
    # 2816 rows: one launch up to there)
    fp32 = topk_forward.TOPK_FP32
    num_v = math.ceil(vocab / fp32.block_v)
    chunk = invariant_chunk_tiles(num_v, 132, fp32)
    plans = {n: topk_forward._launch_plan(num_v, 16, chunk, True, n, fp32.block_m,
                                          fp32.block_v)
             for n in (1920, 1921, 2048)}
    assert [(plans[n][0], plans[n][2]) for n in plans] == [(2, 1920), (1, 2816), (1, 2816)]
