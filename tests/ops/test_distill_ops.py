"""Top-k log-probs and log-probs at given ids (chunked torch path) against fp64 references."""

from __future__ import annotations

import pytest
import torch

from megatron_overlay.ops import linear_logprobs_at, linear_topk_logprobs
from megatron_overlay.ops.topk_merge import order_candidates, tile_topk

from .test_fused_ops import make

IGNORE = -100


def ref_logp(hidden, weight, temperature):
    t = temperature.double()[:, None] if isinstance(temperature, torch.Tensor) else temperature
    return torch.log_softmax((hidden @ weight.T) / t, dim=-1)


def ref_topk(logp, k):
    """Descending, ties to the lower id: a stable sort of the fp64 log-probs."""
    order = logp.argsort(dim=1, descending=True, stable=True)[:, :k]
    return logp.gather(1, order), order


def rel_err(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


@pytest.mark.parametrize("k", [1, 8, 40])
@pytest.mark.parametrize("temperature", [0.7, "per-token"])
def test_topk_matches_fp64(k, temperature):
    hidden, weight, labels = make(61, 32, 9000, seed=k, ignore_every=9)  # 3 vocab chunks
    if temperature == "per-token":
        temperature = torch.linspace(0.4, 1.8, 61)
    gen = torch.Generator().manual_seed(2)
    c_topk, c_lp, c_ent = (torch.randn(61, k, generator=gen), torch.randn(61, generator=gen),
                           torch.randn(61, generator=gen))
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    out = linear_topk_logprobs(h, w, k, temperature=temperature, labels=labels,
                               return_entropy=True, ignore_index=IGNORE)
    assert out.topk_ids.dtype == torch.int64 and out.topk_log_probs.dtype == torch.float32
    ((out.topk_log_probs * c_topk).sum() + (out.log_probs * c_lp).sum()
     + (out.entropy * c_ent).sum()).backward()

    h2, w2 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    logp = ref_logp(h2, w2, temperature)
    r_vals, r_ids = ref_topk(logp.detach(), k)
    assert torch.equal(out.topk_ids, r_ids)
    assert (out.topk_log_probs.double() - r_vals).abs().max() <= 1e-5
    valid = labels != IGNORE
    r_lp = torch.where(valid, logp.gather(1, labels.clamp(min=0)[:, None]).squeeze(1), 0.0)
    r_ent = torch.where(valid, -(logp.exp() * logp).sum(1), 0.0)
    assert (out.log_probs.double() - r_lp).abs().max() <= 2e-5  # |log p| up to ~25 at T=0.4
    assert (out.entropy.double() - r_ent).abs().max() <= 2e-5  # ~9 summed over 9000 terms
    # the gradient of the log-probs at the (fixed) chosen ids
    ((logp.gather(1, r_ids) * c_topk.double()).sum() + (r_lp * c_lp.double()).sum()
     + (r_ent * c_ent.double()).sum()).backward()
    assert rel_err(h.grad, h2.grad) <= 1e-5 and rel_err(w.grad, w2.grad) <= 1e-5


def test_topk_ties_go_to_the_lower_id_across_vocab_chunks():
    hidden, weight, _ = make(5, 8, 9000, seed=4)
    weight[3] = weight[3] * 10.0
    weight[8500] = weight[7] = weight[4100] = weight[3]  # equal logits in 3 vocab chunks
    hidden = torch.stack([weight[3]] * 5)  # id 3 and its copies are the top 4
    out = linear_topk_logprobs(hidden, weight, 3)
    assert out.topk_ids[0].tolist() == [3, 7, 4100]
    assert torch.equal(out.topk_log_probs[:, 0], out.topk_log_probs[:, 2])


def test_tile_topk_and_merge_settle_ties_exactly():
    z = torch.tensor([[1.0, 5.0, 5.0, 2.0, 5.0, 5.0]])
    values, ids = tile_topk(z, 3, id_offset=10)
    assert ids.tolist() == [[11, 12, 14]] and values.tolist() == [[5.0, 5.0, 5.0]]
    merged_v, merged_i = order_candidates(torch.tensor([[5.0, 5.0, 4.0, 5.0]]),
                                          torch.tensor([[20, 11, 2, 12]]), 3)
    assert merged_i.tolist() == [[11, 12, 20]]


def test_topk_without_labels_returns_only_the_topk():
    hidden, weight, _ = make(6, 8, 50)
    out = linear_topk_logprobs(hidden, weight, 4)
    assert out.log_probs is None and out.entropy is None
    assert out.topk_ids.shape == out.topk_log_probs.shape == (6, 4)
    assert (out.topk_log_probs[:, :-1] >= out.topk_log_probs[:, 1:]).all()


def test_topk_equals_logprobs_at_its_ids():
    hidden, weight, _ = make(30, 16, 700, seed=9)
    out = linear_topk_logprobs(hidden, weight, 6, temperature=1.3)
    at, _ = linear_logprobs_at(hidden, weight, out.topk_ids, temperature=1.3)
    assert (at - out.topk_log_probs).abs().max() <= 1e-5


@pytest.mark.parametrize("temperature", [0.6, "per-token"])
def test_logprobs_at_matches_fp64(temperature):
    hidden, weight, _ = make(45, 24, 9000, seed=5)
    if temperature == "per-token":
        temperature = torch.linspace(0.5, 2.0, 45)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 9000, (45, 7), generator=gen)
    ids[:, 1] = ids[:, 0]  # a repeated id gets both gradients
    c, c_ent = torch.randn(45, 7, generator=gen), torch.randn(45, generator=gen)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprobs_at(h, w, ids, temperature=temperature, return_entropy=True)
    ((lp * c).sum() + (ent * c_ent).sum()).backward()
    h2, w2 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    logp = ref_logp(h2, w2, temperature)
    r_lp, r_ent = logp.gather(1, ids), -(logp.exp() * logp).sum(1)
    assert (lp.double() - r_lp).abs().max() <= 1e-5
    assert (ent.double() - r_ent).abs().max() <= 2e-5  # ~9 summed over 9000 terms
    ((r_lp * c.double()).sum() + (r_ent * c_ent.double()).sum()).backward()
    assert rel_err(h.grad, h2.grad) <= 1e-5 and rel_err(w.grad, w2.grad) <= 1e-5


def test_bf16_inputs_within_bf16_tolerance():
    hidden, weight, _ = make(40, 32, 3000, dtype=torch.bfloat16, seed=6)
    ids = torch.randint(0, 3000, (40, 4), generator=torch.Generator().manual_seed(1))
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, _ = linear_logprobs_at(h, w, ids, temperature=0.9)
    lp.sum().backward()
    assert h.grad.dtype == w.grad.dtype == torch.bfloat16
    h2, w2 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    r = ref_logp(h2, w2, 0.9).gather(1, ids)
    r.sum().backward()
    assert (lp.double() - r).abs().max() <= 2e-2
    assert rel_err(h.grad, h2.grad) <= 2e-2 and rel_err(w.grad, w2.grad) <= 2e-2


def test_forward_only_keeps_nothing_and_needs_no_grad():
    hidden, weight, _ = make(8, 8, 40)
    with torch.no_grad():
        out = linear_topk_logprobs(hidden, weight, 3)
        lp, _ = linear_logprobs_at(hidden, weight, out.topk_ids)
    assert not lp.requires_grad and torch.allclose(lp, out.topk_log_probs, atol=1e-6)


@pytest.mark.parametrize("k, error, text", [
    (0, ValueError, "k must satisfy 1 <= k <= 256"),
    (257, ValueError, "k must satisfy 1 <= k <= 256"),
    (17, ValueError, r"k <= vocab size \(16\)"),
    (2.0, TypeError, "k must be an int"),
    (True, TypeError, "k must be an int"),
])
def test_bad_k_raises(k, error, text):
    hidden, weight, _ = make(4, 8, 16)
    with pytest.raises(error, match=text):
        linear_topk_logprobs(hidden, weight, k)


@pytest.mark.parametrize("mutate, error, text", [
    (lambda ids: ids + 16, ValueError, r"token_ids out of range: ids must lie in \[0, 16\)"),
    (lambda ids: ids - 20, ValueError, "token_ids out of range"),
    (lambda ids: ids.float(), TypeError, "token_ids must be an int64 tensor"),
    (lambda ids: ids[:, 0], ValueError, r"token_ids must have shape \[4, k\]"),
    (lambda ids: ids[:3], ValueError, r"token_ids must have shape \[4, k\]"),
    (lambda ids: ids[:, :0], ValueError, r"k >= 1"),
    (lambda ids: ids.tolist(), TypeError, "token_ids must be an int64 tensor"),
])
def test_bad_token_ids_raise(mutate, error, text):
    hidden, weight, _ = make(4, 8, 16)
    ids = torch.randint(0, 16, (4, 3))
    with pytest.raises(error, match=text):
        linear_logprobs_at(hidden, weight, mutate(ids))


@pytest.mark.parametrize("temperature, error, text", [
    (torch.tensor([1.0, 0.0, 1.0, 1.0]), ValueError, "finite and > 0 everywhere"),
    (torch.ones(5), ValueError, r"\[N\] = \[4\]"),
    (0.0, ValueError, "temperature must be finite and > 0"),
])
def test_bad_temperatures_raise_in_both_ops(temperature, error, text):
    hidden, weight, _ = make(4, 8, 16)
    with pytest.raises(error, match=text):
        linear_topk_logprobs(hidden, weight, 2, temperature=temperature)
    with pytest.raises(error, match=text):
        linear_logprobs_at(hidden, weight, torch.zeros(4, 2, dtype=torch.int64),
                           temperature=temperature)


@pytest.mark.parametrize("op", ["logprob", "at", "topk_labels"])
def test_zero_tokens_give_empty_outputs_and_zero_gradients(op):
    """A rank or microbatch with no tokens: empty outputs, zero gradients, no error (the
    label record of no labels was a reduction of nothing)."""
    from megatron_overlay.ops import linear_logprob_entropy
    h = torch.randn(0, 16, requires_grad=True)
    w = torch.randn(900, 16, requires_grad=True)
    none = torch.zeros(0, dtype=torch.long)
    if op == "logprob":
        outs = linear_logprob_entropy(h, w, none, temperature=0.7)
    elif op == "at":
        outs = (linear_logprobs_at(h, w, torch.zeros(0, 3, dtype=torch.long), temperature=0.7,
                                   return_entropy=True))
    else:
        got = linear_topk_logprobs(h, w, 4, temperature=0.7, labels=none, return_entropy=True)
        outs = (got.topk_log_probs, got.log_probs, got.entropy)
        assert got.topk_ids.shape == (0, 4)
    assert all(o.shape[0] == 0 for o in outs)
    sum(o.sum() for o in outs).backward()
    assert h.grad.shape == (0, 16) and w.grad.shape == (900, 16) and not w.grad.any()


@pytest.mark.parametrize("op", ["logprob", "at", "topk"])
def test_second_order_gradients_raise(op):
    """The backward treats the saved lse / E[z] as constants: a graph through it
    (create_graph=True) would give wrong second derivatives, so it raises, naming why;
    the first-order gradient of the same call is unchanged."""
    from megatron_overlay.ops import linear_logprob_entropy
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(6, 8, generator=gen, requires_grad=True)
    w = torch.randn(40, 8, generator=gen, requires_grad=True)
    ids = torch.randint(0, 40, (6, 3), generator=gen)

    def loss():
        if op == "logprob":
            return linear_logprob_entropy(h, w, ids[:, 0], temperature=0.7)[0].sum()
        if op == "at":
            return linear_logprobs_at(h, w, ids, temperature=0.7)[0].sum()
        return linear_topk_logprobs(h, w, 3, temperature=0.7).topk_log_probs.sum()

    with pytest.raises(RuntimeError, match="first-order gradients only.*create_graph=True"):
        torch.autograd.grad(loss(), w, create_graph=True)
    (g,) = torch.autograd.grad(loss(), w)
    ref_w = w.detach().double().requires_grad_()
    logp = torch.log_softmax(h.detach().double() @ ref_w.T / 0.7, dim=-1)
    if op == "logprob":
        ref = logp.gather(1, ids[:, :1]).sum()
    elif op == "at":
        ref = logp.gather(1, ids).sum()
    else:
        ref = logp.topk(3, dim=1).values.sum()
    (g_ref,) = torch.autograd.grad(ref, ref_w)
    assert (g.double() - g_ref).abs().max() < 1e-5


@pytest.mark.parametrize("op", ["logprob", "at", "topk"])
def test_weight_on_another_device_is_refused(op):
    """hidden and weight on different devices: a ValueError naming both (the at-ids and
    top-k ops ran on a meta weight and returned garbage)."""
    from megatron_overlay.ops import linear_logprob_entropy
    h, w = torch.randn(4, 8), torch.randn(16, 8, device="meta")
    ids = torch.randint(0, 16, (4, 2))
    call = {"logprob": lambda: linear_logprob_entropy(h, w, ids[:, 0]),
            "at": lambda: linear_logprobs_at(h, w, ids),
            "topk": lambda: linear_topk_logprobs(h, w, 2)}[op]
    with pytest.raises(ValueError, match="hidden is on cpu but weight is on meta"):
        call()


def test_order_candidates_puts_padding_after_a_nan_rows_candidates():
    # a NaN row (invalid temperature, NaN hidden) ranks its values as -inf, ties to the
    # lower id; a padded place (-inf, PAD_ID) stays after them (nan_to_num's default made
    # -inf the least finite float, above the NaNs)
    from megatron_overlay.ops.topk_merge import PAD_ID
    nan, inf = float("nan"), float("inf")
    values = torch.tensor([[nan, -inf, nan, nan], [2.0, -inf, 1.0, -inf]])
    ids = torch.tensor([[7, PAD_ID, 3, 5], [4, PAD_ID, 9, 2]])
    got_v, got_i = order_candidates(values, ids, 4)
    assert got_i.tolist() == [[3, 5, 7, PAD_ID], [4, 9, 2, PAD_ID]]
    assert got_v[0, :3].isnan().all() and got_v[1].tolist() == [2.0, 1.0, -inf, -inf]


def _tp_nan_row(rank):
    import torch.distributed as dist

    gen = torch.Generator().manual_seed(0)
    h, w = torch.randn(3, 16, generator=gen), torch.randn(10, 16, generator=gen)
    h[1] = float("nan")
    tp = linear_topk_logprobs(h, w[rank * 5:(rank + 1) * 5], 7, tp_group=dist.group.WORLD)
    one = linear_topk_logprobs(h, w, 7)
    assert torch.equal(tp.topk_ids, one.topk_ids), (tp.topk_ids, one.topk_ids)
    assert tp.topk_log_probs[1].isnan().all()


def test_tp2_gloo_topk_of_a_nan_row_matches_tp1():
    """k = 7 over two shards of 5 ids: each shard pads its list; a NaN row's ids were
    the pads', as -2^63 (PAD_ID through the fp64 all-gather), ahead of its real ids."""
    from tests.support.gloo_pair import run_on_two_ranks

    run_on_two_ranks(_tp_nan_row)


def test_numpy_integers_are_ints():
    """k and ignore_index read from a numpy config (np.int64) are ints: the same results,
    and k reaches the op as a Python int (they were TypeErrors)."""
    np = pytest.importorskip("numpy")
    from megatron_overlay.ops import linear_logprob_entropy
    from megatron_overlay.ops.linear_topk import validate_k
    from megatron_overlay.ops.params import LogprobParams
    hidden, weight, labels = make(6, 8, 40, ignore_every=3)
    labels[labels == -100] = -7
    ref = linear_topk_logprobs(hidden, weight, 3, labels=labels, ignore_index=-7,
                               return_entropy=True)
    got = linear_topk_logprobs(hidden, weight, np.int64(3), labels=labels,
                               ignore_index=np.int32(-7), return_entropy=True)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    ref = linear_logprob_entropy(hidden, weight, labels, ignore_index=-7)
    got = linear_logprob_entropy(hidden, weight, labels, ignore_index=np.int16(-7))
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    k = validate_k(np.uint8(5), 40)
    assert type(k) is int and k == 5
    assert type(LogprobParams(ignore_index=np.int64(-7)).ignore_index) is int
    with pytest.raises(TypeError, match="k must be an int"):
        validate_k(np.float64(3.0), 40)
    with pytest.raises(ValueError, match="got k=41"):
        validate_k(np.int64(41), 40)


@pytest.mark.parametrize("op", ["logprob", "at", "topk"])
def test_forward_mode_ad_is_refused_not_silently_dropped(op):
    """Dual inputs (torch.func.jvp, forward_ad): the ops have no jvp. Without a tensor that
    requires grad the call skipped Function.apply, and a kernel (which sees only data
    pointers) would return outputs without the tangent; now apply refuses it."""
    from torch.autograd import forward_ad

    from megatron_overlay.ops import linear_logprob_entropy
    hidden, weight, labels = make(6, 8, 40)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(hidden, torch.randn_like(hidden))
        with pytest.raises(NotImplementedError, match="jvp"):
            if op == "logprob":
                linear_logprob_entropy(dual, weight, labels)
            elif op == "at":
                linear_logprobs_at(dual, weight, labels[:, None])
            else:
                linear_topk_logprobs(dual, weight, 3)
    # and outside a dual level the forward-only path is taken as before
    assert linear_logprob_entropy(hidden, weight, labels)[0].grad_fn is None


def test_chosen_columns_without_a_sync_are_nonzeros():
    """The torch top-k path on CUDA picks a tile's columns by a stable sort (nonzero syncs
    the host); it must give nonzero's ascending columns for every mask with kk a row."""
    from megatron_overlay.ops.topk_merge import chosen_columns
    g = torch.Generator().manual_seed(3)
    for _ in range(100):
        n, w = 4, int(torch.randint(1, 70, (1,), generator=g))
        kk = int(torch.randint(1, w + 1, (1,), generator=g))
        chosen = torch.zeros(n, w, dtype=torch.bool)
        for row in range(n):
            chosen[row, torch.randperm(w, generator=g)[:kk]] = True
        assert torch.equal(chosen_columns(chosen, kk, sync_free=True),
                           chosen_columns(chosen, kk, sync_free=False))


def test_an_ignore_index_int32_labels_cannot_hold_is_refused():
    """int32 labels are compared with ignore_index cast to int32, where -2^32 - 100 wraps to
    -100 (torch's path ignored the label -100 then; the kernel's padding rows read it)."""
    from megatron_overlay.ops import linear_logprob_entropy
    hidden, weight, labels = make(6, 8, 40)
    wide = -(2 ** 32) - 100
    with pytest.raises(ValueError, match=r"ignore_index=-4294967396 does not fit the int32 "
                                         r"labels; pass labels.long\(\)"):
        linear_logprob_entropy(hidden, weight, labels.int(), ignore_index=wide)
    with pytest.raises(ValueError, match="does not fit the int32 labels"):
        linear_topk_logprobs(hidden, weight, 2, labels=labels.int(), ignore_index=wide)
    got = linear_logprob_entropy(hidden, weight, labels, ignore_index=wide)  # int64: fine
    ref = linear_logprob_entropy(hidden, weight, labels)
    assert torch.equal(got[0], ref[0])
