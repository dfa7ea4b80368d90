"""Batch invariance of the chunked torch path (CPU): a token's outputs do not depend on N
or on its position. The Triton path's counterpart is in test_cuda_graphs.py (GPU)."""

from __future__ import annotations

import pytest
import torch

from megatron_overlay.ops import (batch_invariance, linear_logprob_entropy, linear_topk_logprobs,
                                  torch_chunked)

H, V, N = 48, 9000, 1100  # V and N span several vocab and token tiles, both partial


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=g)
    weight = torch.randn(V, H, generator=g) / H ** 0.5 * 4
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::13] = -100
    return hidden, weight, labels


# the precision modes of ops/params.py: fp32 logits, logits rounded to bf16, mixed operands
MODES = {"fp32": ({}, None), "bf16_logits": ({"logits_dtype": torch.bfloat16}, None),
         "bf16_hidden_fp32_weight": ({}, torch.bfloat16)}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("threads", [1, 3])
def test_same_row_same_bits_whatever_n_and_position(threads, mode):
    options, hidden_dtype = MODES[mode]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        hidden, weight, labels = _inputs()
        if hidden_dtype is not None:
            hidden = hidden.to(hidden_dtype)
        ref_lp, ref_ent = linear_logprob_entropy(hidden, weight, labels, temperature=0.7,
                                                 **options)
        for n, start in ((1, 0), (1, 1099), (7, 3), (8, 3), (37, 500), (1029, 50)):
            sl = slice(start, start + n)
            lp, ent = linear_logprob_entropy(hidden[sl], weight, labels[sl], temperature=0.7,
                                             **options)
            assert torch.equal(lp, ref_lp[sl]), (n, start)
            assert torch.equal(ent, ref_ent[sl]), (n, start)
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
        lp, ent = linear_logprob_entropy(hidden[perm], weight, labels[perm], temperature=0.7,
                                         **options)
        assert torch.equal(lp, ref_lp[perm]) and torch.equal(ent, ref_ent[perm])
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("with_labels", [True, False])
def test_topk_same_row_same_bits_whatever_n_and_position(with_labels):
    """The top-k op: ids, their log-probs and (with labels) the labels' log-probs and the
    entropy, bitwise, whatever N and the row's position; and the same bits as
    linear_logprob_entropy's log-probs and entropy."""
    hidden, weight, labels = _inputs()
    kw = dict(labels=labels, return_entropy=True) if with_labels else {}

    def topk(rows):
        kw_rows = {**kw, "labels": labels[rows]} if with_labels else kw
        return linear_topk_logprobs(hidden[rows], weight, 5, temperature=0.7, **kw_rows)

    ref = topk(slice(None))
    if with_labels:
        lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
        assert torch.equal(ref.log_probs, lp) and torch.equal(ref.entropy, ent)
    for n, start in ((1, 0), (1, 1099), (7, 3), (37, 500), (1029, 50)):
        got = topk(slice(start, start + n))
        for a, b in zip(got, ref):
            if b is not None:
                assert torch.equal(a, b[start:start + n]), (n, start)
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    got = topk(perm)
    for a, b in zip(got, ref):
        if b is not None:
            assert torch.equal(a, b[perm])


def test_per_element_matches_plain_call_within_rounding():
    x = torch.rand(10007) * 50 + 1e-3
    got = batch_invariance.per_element(torch.log, x)
    assert got.shape == x.shape
    torch.testing.assert_close(got, torch.log(x), rtol=2e-7, atol=0)


def test_switch_off_keeps_unpadded_tiles(monkeypatch):
    """MEGATRON_OVERLAY_BATCH_INVARIANT=0: same values within rounding (the old path)."""
    hidden, weight, labels = _inputs()
    on = torch_chunked.forward_stats(hidden[:7], weight, labels[:7].clamp_min(-1), 0.7 ** -1, True)
    monkeypatch.setenv(batch_invariance.ENV, "0")
    off = torch_chunked.forward_stats(hidden[:7], weight, labels[:7].clamp_min(-1), 0.7 ** -1, True)
    torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-5)


def _tp_same_bits(rank):
    import torch.distributed as dist

    hidden, weight, labels = _inputs()
    shard = weight[rank * V // 2:(rank + 1) * V // 2]
    group = dist.group.WORLD
    ref_lp, ref_ent = linear_logprob_entropy(hidden, shard, labels, temperature=0.7,
                                             tp_group=group)
    for n, start in ((1, 0), (7, 3), (1029, 50)):
        sl = slice(start, start + n)
        lp, ent = linear_logprob_entropy(hidden[sl], shard, labels[sl], temperature=0.7,
                                         tp_group=group)
        assert torch.equal(lp, ref_lp[sl]) and torch.equal(ent, ref_ent[sl]), (n, start)


def test_tp2_gloo_same_bits_whatever_n_and_position():
    from tests.support.gloo_pair import run_on_two_ranks

    run_on_two_ranks(_tp_same_bits)
