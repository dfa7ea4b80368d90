"""The distillation kernels on a CUDA GPU against the chunked torch path (skipped without one):
the top-k forward stage, per-row temperatures, and both new ops through autograd."""

from __future__ import annotations

import functools

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (the Triton kernels' GPU path); "
                "test_triton_distill_interpreter.py covers the math on CPU",
                allow_module_level=True)
triton = pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay.ops import (linear_logprobs_at, linear_topk_logprobs,  # noqa: E402
                                  torch_chunked, torch_topk)
from megatron_overlay.ops.kernels import triton_impl, triton_topk  # noqa: E402


def _inputs(n, h, v, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(n, h, device="cuda", generator=g).to(dtype)
    weight = (torch.randn(v, h, device="cuda", generator=g) * (2.0 / h ** 0.5)).to(dtype)
    weight[v - 1] = weight[3]  # a tie: the lower id first
    labels = torch.randint(0, v, (n,), device="cuda", generator=g)
    labels[::5] = -1
    inv_t = torch.rand(n, device="cuda", generator=g) + 0.5
    return hidden, weight, labels, inv_t


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 8, 33])
@pytest.mark.parametrize("shape", [(300, 264, 5003), (1029, 512, 20000)])
def test_topk_stage_matches_torch(dtype, k, shape):
    hidden, weight, labels, inv_t = _inputs(*shape, dtype)
    for temperature in (inv_t, 1 / 0.7):
        r_stats, r_vals, r_ids = torch_topk.topk_stats(hidden, weight, labels, temperature,
                                                       True, k)
        stats, vals, ids = triton_topk.topk_stats(hidden, weight, labels, temperature, True, k)
        torch.testing.assert_close(stats, r_stats, atol=2e-4, rtol=2e-4)
        torch.testing.assert_close(vals, r_vals, atol=2e-4, rtol=0)
        # fp32 sums in two orders may swap near-ties; everything else is the same id
        assert (ids == r_ids).float().mean() > 0.995


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 2, 3, 32])
def test_topk_ranks_z_not_the_raw_logits(dtype, k):
    """Two distinct logits that T rounds to one z (tests/support/scaled_ties.py) tie, and
    go to the lower id, as in the torch path; the two in one 256-column tile, and the lower
    id's tile before and after the other's; a row with an invalid temperature (NaN)
    comes out NaN with real ids."""
    from tests.support.scaled_ties import TEMPERATURE, scaled_tie_inputs
    g = torch.Generator(device="cuda").manual_seed(6)
    n, v = 300, 5003
    inv_t = torch.full((n,), 1 / TEMPERATURE, device="cuda")
    inv_t[7] = float("nan")
    for low, high, best in ((1030, 1100, 4000), (300, 1100, 4000), (4000, 1100, 300)):
        hidden, weight = scaled_tie_inputs(n, 264, v, low, high, best, dtype, g)
        for temperature in (1 / TEMPERATURE, inv_t):
            r_stats, r_vals, r_ids = torch_topk.topk_stats(hidden, weight, None, temperature,
                                                           True, k)
            stats, vals, ids = triton_topk.topk_stats(hidden, weight, None, temperature,
                                                      True, k)
            ok = ~r_vals.isnan().any(dim=1)
            assert torch.equal(ids[ok], r_ids[ok])
            assert torch.equal(vals[ok], r_vals[ok])
            assert vals[~ok].isnan().all() and ((ids[~ok] >= 0) & (ids[~ok] < v)).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("k", [8, 33])
def test_second_maxima_change_no_bit(dtype, k, monkeypatch):
    """The top-k's three paths (topk_forward.SECOND_MAX_MIN_K and SECOND_MAX_SMALL_MIN_K,
    both set: second maxima from k = 2 or never; EXACT_SECOND_MAX_TOKENS and _MIN_K:
    exact second maxima or rounded up): a chosen tile's maximum (and second) taken from the
    forward kernel, or recomputed by the rescan, is the same logit to the bit; so are the
    ids (and the statistics, which the second maxima do not touch)."""
    from megatron_overlay.ops.kernels import topk_forward
    hidden, weight, labels, inv_t = _inputs(1029, 512, 20000, dtype, seed=3)
    weight[700:760] = weight[300:360]  # tied tiles' maxima, and a tile of two logits >= thr
    outs = {}
    for second_from, exact_rows in ((2, 10 ** 9), (2, 0), (10 ** 9, 0)):
        monkeypatch.setattr(topk_forward, "SECOND_MAX_MIN_K", second_from)
        monkeypatch.setattr(topk_forward, "SECOND_MAX_SMALL_MIN_K", second_from)
        monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_TOKENS", exact_rows)
        monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_MIN_K", second_from)
        outs[second_from, exact_rows] = triton_topk.topk_stats(hidden, weight, labels, inv_t,
                                                               True, k)
    for path in ((2, 10 ** 9), (2, 0)):
        for a, b in zip(outs[path], outs[10 ** 9, 0]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_logits_at_kernel_matches_torch(dtype, k):
    hidden, weight, _, inv_t = _inputs(777, 1000, 3001, dtype)
    ids = torch.randint(-1, 3001, (777, k), device="cuda")  # -1: in another shard
    for inv_temperature in (inv_t, 1 / 0.7):  # per-row [N] and scalar
        ref = torch_chunked.logits_at(hidden, weight, ids, inv_temperature)
        got = triton_impl.logits_at(hidden, weight, ids, inv_temperature)
        assert torch.equal(got == 0, ref == 0)
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_check_and_gather_in_one_launch_is_the_two_kernels(dtype, k):
    """logits_at_ids (the at-ids op's one launch): check_ids' and logits_at's outputs bit
    for bit, in a vocab shard too, with bad ids (below 0, at V and past it)."""
    hidden, weight, _, inv_t = _inputs(777, 1000, 3001, dtype)
    ids = torch.randint(-2, 3003, (777, k), device="cuda")
    ids[3, 0], ids[10, k - 1], ids[11] = 3001, -5, 7  # bad ids, and a clean row
    for start, width in ((0, 3001), (1000, 1200)):
        shard = weight[start:start + width]
        local, bad_rows, record = triton_impl.check_ids(ids, start, width, 3001)
        assert bad_rows[3] and bad_rows[10] and not bad_rows[11]
        for inv_temperature in (inv_t, 1 / 0.7):
            z = triton_impl.logits_at(hidden, shard, local, inv_temperature)
            got = triton_impl.logits_at_ids(hidden, shard, ids, start, width, 3001,
                                            inv_temperature)
            for a, b in zip(got, (z, local, bad_rows, record)):
                assert torch.equal(a, b)


def test_ops_match_torch_impl(monkeypatch):
    hidden, weight, labels, inv_t = _inputs(513, 256, 7000, torch.bfloat16, seed=3)
    labels[labels < 0] = -100
    ids = torch.randint(0, 7000, (513, 6), device="cuda")
    ids[:, 1] = ids[:, 0]
    results = {}
    for impl in ("torch", "triton"):
        monkeypatch.setenv("MEGATRON_OVERLAY_IMPL", impl)
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        top = linear_topk_logprobs(h, w, 8, temperature=1 / inv_t, labels=labels,
                                   return_entropy=True)
        at, ent = linear_logprobs_at(h, w, ids, temperature=1 / inv_t, return_entropy=True)
        (top.topk_log_probs.sum() * 0.3 + top.log_probs.sum() + top.entropy.sum() * 0.1
         + at.sum() * 0.2 + ent.sum() * 0.05).backward()
        results[impl] = (top, at.detach(), ent.detach(), h.grad.float(), w.grad.float())
    ref, got = results["torch"], results["triton"]
    assert (got[0].topk_ids == ref[0].topk_ids).float().mean() > 0.995
    torch.testing.assert_close(got[0].topk_log_probs, ref[0].topk_log_probs, atol=1e-4, rtol=0)
    torch.testing.assert_close(got[0].log_probs, ref[0].log_probs, atol=1e-4, rtol=0)
    torch.testing.assert_close(got[1], ref[1], atol=1e-4, rtol=0)
    torch.testing.assert_close(got[2], ref[2], atol=1e-4, rtol=0)
    for a, b in zip(got[3:], ref[3:]):
        assert ((a - b).abs().max() / b.abs().max()) < 2e-2


@pytest.mark.parametrize("pairs, num_t, with_tile", [
    (8192 * 32, 594, None), (4096 * 8 + 5, 594, None), (3, 1, None), (2048, 594, None),
    (1500, 594, None),  # one block
    # a lone block whose other pairs are past the tiles (known maxima, unfilled): up to
    # SORT_FEW (128) of them placed without the block's sort, one more sorted
    (2048, 594, 15), (2048, 594, 128), (2048, 594, 129), (777, 594, 1), (64, 5, 0)])
def test_tile_sort_matches_torch_sort(pairs, num_t, with_tile):
    """The rescan's counting sort (kernels/tile_sort.py): torch.sort's stable order, and
    its segments' table."""
    from megatron_overlay.ops.kernels.tile_sort import sort_tiles
    from megatron_overlay.ops.topk_merge import PAD_ID
    from tests.support.tile_runs import runs_reference

    g = torch.Generator(device="cuda").manual_seed(pairs)
    tiles = torch.randint(0, num_t, (pairs,), device="cuda", generator=g)
    tiles[torch.rand(pairs, device="cuda", generator=g) < 0.01] = PAD_ID
    if with_tile is not None:  # codes past the tiles, a third unfilled; then the few
        tiles = num_t + 1 + torch.randint(0, 10 ** 6, (pairs,), device="cuda", generator=g)
        tiles[::3] = PAD_ID
        few = torch.randperm(pairs, device="cuda", generator=g)[:with_tile]
        tiles[few] = torch.randint(0, num_t, (with_tile,), device="cuda", generator=g)
    got_t, got_p, runs = sort_tiles(tiles, num_t, 128)
    ref_t, ref_p = torch.sort(tiles.clamp(max=num_t), stable=True)
    assert torch.equal(got_t.long(), ref_t) and torch.equal(got_p.long(), ref_p)
    assert torch.equal(runs.cpu(), runs_reference(tiles, num_t, 128, runs.shape[1]))


@pytest.mark.parametrize("n, k", [(256, 1), (256, 8), (256, 32), (3000, 8)])
def test_topk_stage_finalizes_in_its_last_kernel(n, k, monkeypatch):
    """topk_stats(finalize=...): finalize's outputs from the last kernel's launch
    (merge_topk at k = 1, else merge_runs) are those of finalize's own launch over the
    unmerged statistics, bit for bit, and that launch never runs; labels ignored and out
    of range (NaN log-probs, the record reduced alike), entropy, a per-row temperature."""
    from megatron_overlay.ops import label_check
    from megatron_overlay.ops.kernels import finalize_stats, triton_impl, triton_topk
    from megatron_overlay.ops.params import FinalizeRequest

    g = torch.Generator(device="cuda").manual_seed(n + k)
    vocab = 32000
    h = torch.randn(n, 1024, device="cuda", generator=g).bfloat16()
    w = (torch.randn(vocab, 1024, device="cuda", generator=g) * 1024 ** -0.5 * 4).bfloat16()
    labels = torch.randint(0, vocab, (n,), device="cuda", generator=g)
    labels[::3] = -100
    labels[1], labels[2] = vocab, -5
    local = torch.where((labels < 0) | (labels >= vocab), -1, labels)
    for inv_t in (1 / 0.7, torch.rand(n, device="cuda", generator=g) + 0.5):
        stats, values, ids = triton_topk.topk_stats(h, w, local, inv_t, True, k, merged=False)
        ref = triton_impl.finalize(stats, labels, vocab, -100, True, values=values)
        calls = []
        own = finalize_stats.finalize
        monkeypatch.setattr(finalize_stats, "finalize",
                            lambda *a, **kw: calls.append(1) or own(*a, **kw))
        got, got_v, got_i = triton_topk.topk_stats(h, w, local, inv_t, True, k,
                                                   finalize=FinalizeRequest(labels, vocab, -100))
        monkeypatch.setattr(finalize_stats, "finalize", own)
        assert not calls
        assert torch.equal(got_i, ids) and torch.equal(got_v, values)
        for a, b in zip(got[:6], ref[:6]):
            assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(),
                                                                     b.nan_to_num())
        for rec in (got[6], ref[6]):
            with pytest.raises(ValueError, match="smallest -5, largest 32000"):
                label_check._raise_if_bad(rec.cpu(), functools.partial(
                    label_check._message, vocab_size=vocab, ignore_index=-100))


@pytest.mark.parametrize("n, num_t, k", [(8192, 594, 32), (8192 + 5, 594, 24), (1000, 594, 64),
                                         (64, 594, 256), (300, 8192, 32), (37, 20, 32)])
@pytest.mark.parametrize("ties", [False, True])
def test_best_tiles_selection_matches_extraction(n, num_t, k, ties, monkeypatch):
    """best_tiles by selection (merge_topk.select_tiles_kernel: a bit-by-bit search, its
    places written and read back across the program's warps) gives the k extractions'
    bits: values, tiles and the rescan's codes; maxima distinct (the plain branch) or
    rounded to bfloat16 with NaN rows (ties at the k-th: the scan's branch)."""
    from megatron_overlay.ops.kernels import merge_topk

    g = torch.Generator(device="cuda").manual_seed(n + k)
    maxima = torch.randn(num_t, n, device="cuda", generator=g) * 4
    if ties:
        maxima = maxima.bfloat16().float()
        maxima[:, 5::8] = float("nan")
    second = maxima - torch.rand(num_t, n, device="cuda", generator=g)
    at = torch.randint(0, 256, (num_t, n), device="cuda", generator=g, dtype=torch.int32)
    packed = (second.view(torch.int32) & -65536) | at
    for tile_second in (None, packed):
        monkeypatch.setattr(merge_topk, "SELECT_MIN_K", 10 ** 9)
        ref_v, ref_i = merge_topk.best_tiles(maxima, k, tile_second, 256)
        monkeypatch.setattr(merge_topk, "SELECT_MIN_K", 1)
        got_v, got_i = merge_topk.best_tiles(maxima, k, tile_second, 256)
        assert torch.equal(got_v.isnan(), ref_v.isnan())
        assert torch.equal(got_v.nan_to_num(), ref_v.nan_to_num())
        assert torch.equal(got_i, ref_i)


@pytest.mark.parametrize("extract", [False, True], ids=["runs", "extract"])
@pytest.mark.parametrize("n, k", [(8192, 32), (8192 + 5, 8), (1000, 64), (64, 256), (100, 1),
                                  (256, 8), (256, 32)])
def test_merge_runs_matches_merge_topk(n, k, extract, monkeypatch):
    """The rescan's candidates merged as k ordered runs (merge_runs.py), or by extractions
    over all of a row's candidates (its small calls' form), give merge_topk's bits; a NaN
    row: NaN values and distinct real ids of its candidates."""
    from megatron_overlay.ops.kernels import merge_runs as merge_runs_module
    from megatron_overlay.ops.kernels.merge_runs import merge_runs
    from megatron_overlay.ops.kernels.merge_topk import merge_topk
    from tests.support.candidate_runs import candidate_runs

    monkeypatch.setattr(merge_runs_module, "MERGE_EXTRACT_MAX_ROWS", 10 ** 9 if extract else 0)
    vocab = 151936
    cand_v, cand_i, nan_rows = candidate_runs(n, k, vocab,
                                              torch.Generator(device="cuda").manual_seed(k))
    out = (torch.empty(n, k, device="cuda"),
           torch.empty(n, k, dtype=torch.int64, device="cuda"))
    merge_runs(cand_v, cand_i, vocab, k, out)
    ref_v, ref_i = merge_topk(cand_v[None], cand_i[None], vocab, k)
    ok = ~nan_rows
    assert torch.equal(out[0][ok], ref_v[ok]) and torch.equal(out[1][ok], ref_i[ok])
    assert out[0][nan_rows].isnan().all()
    picked = out[1][nan_rows]
    real = picked != torch.iinfo(torch.int64).max
    # as many real ids as the row has candidates, up to k, first; PAD_ID after them
    have = (cand_i[nan_rows] < vocab).sum(dim=1).clamp(max=k)
    assert torch.equal(real.sum(dim=1), have) and torch.equal(real, real.sort(
        dim=1, descending=True, stable=True).values)
    assert (picked[real] < vocab).all()
    distinct = torch.where(real, picked, -1 - torch.arange(k, device="cuda"))
    if k > 1:
        assert (distinct.sort(dim=1).values.diff(dim=1) != 0).all()
