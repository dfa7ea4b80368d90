"""The fused log-prob/entropy op (chunked torch path) against an fp64 materialized reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron_overlay.ops import linear_logprob_entropy, torch_chunked

IGNORE = -100


def reference(hidden, weight, labels, temperature, ignore_index=IGNORE):
    """fp64, materialized logits: (log_probs, entropy), ignored tokens -> 0."""
    z = (hidden.double() @ weight.double().T) / temperature
    return reference_from_z(z, labels, ignore_index)


def reference_from_z(z, labels, ignore_index=IGNORE):
    """(log_probs, entropy) of softmax(z) rows, ignored tokens -> 0."""
    logp = torch.log_softmax(z, dim=-1)
    valid = labels != ignore_index
    picked = logp.gather(1, torch.where(valid, labels, 0)[:, None]).squeeze(1)
    entropy = -(logp.exp() * logp).sum(-1)
    zero = torch.zeros_like(picked)
    return torch.where(valid, picked, zero), torch.where(valid, entropy, zero)


def make(n, h, v, dtype=torch.float32, seed=0, ignore_every=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=gen).to(dtype)
    weight = (torch.randn(v, h, generator=gen) / h ** 0.5 * 4).to(dtype)
    labels = torch.randint(0, v, (n,), generator=gen)
    if ignore_every:
        labels[::ignore_every] = IGNORE
    return hidden, weight, labels


def run_both(hidden, weight, labels, temperature, return_entropy=True, seed=1):
    gen = torch.Generator().manual_seed(seed)
    c_lp, c_ent = torch.randn(len(labels), generator=gen), torch.randn(len(labels), generator=gen)
    h1, w1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprob_entropy(h1, w1, labels, temperature=temperature,
                                     return_entropy=return_entropy, ignore_index=IGNORE)
    loss = (lp * c_lp).sum() + ((ent * c_ent).sum() if ent is not None else 0)
    loss.backward()
    h2, w2 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    rlp, rent = reference(h2, w2, labels, temperature)
    rloss = (rlp * c_lp.double()).sum() + ((rent * c_ent.double()).sum() if return_entropy else 0)
    rloss.backward()
    return (lp, ent, h1.grad, w1.grad), (rlp, rent, h2.grad, w2.grad)


def rel_err(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_fp32_matches_fp64_reference(temperature):
    hidden, weight, labels = make(257, 48, 9000, ignore_every=11)
    (lp, ent, dh, dw), (rlp, rent, rdh, rdw) = run_both(hidden, weight, labels, temperature)
    assert lp.dtype == ent.dtype == torch.float32
    assert (lp.double() - rlp).abs().max() <= 1e-5
    assert (ent.double() - rent).abs().max() <= 1e-5
    assert rel_err(dh, rdh) <= 1e-5
    assert rel_err(dw, rdw) <= 1e-5


def test_bf16_inputs_within_bf16_tolerance():
    hidden, weight, labels = make(100, 64, 5000, dtype=torch.bfloat16)
    (lp, ent, dh, dw), (rlp, rent, rdh, rdw) = run_both(hidden, weight, labels, 0.7)
    assert dh.dtype == dw.dtype == torch.bfloat16
    assert (lp.double() - rlp).abs().max() <= 2e-2
    assert (ent.double() - rent).abs().max() <= 2e-2
    assert rel_err(dh, rdh) <= 2e-2 and rel_err(dw, rdw) <= 2e-2


def test_ignored_tokens_get_zero_and_no_gradient():
    hidden, weight, labels = make(40, 16, 300)
    labels[5] = labels[17] = IGNORE
    h = hidden.clone().requires_grad_()
    lp, ent = linear_logprob_entropy(h, weight, labels, temperature=0.9)
    assert lp[5] == 0 and lp[17] == 0 and ent[5] == 0 and ent[17] == 0
    (lp.sum() + ent.sum()).backward()
    assert torch.all(h.grad[5] == 0) and torch.all(h.grad[17] == 0)
    assert h.grad[6].abs().sum() > 0


def test_return_entropy_false_skips_entropy(monkeypatch):
    hidden, weight, labels = make(30, 16, 500)
    seen = []
    real = torch_chunked.forward_stats

    def spy(*args, **kwargs):
        seen.append(args[4])  # with_entropy
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_chunked, "forward_stats", spy)
    (lp, ent, dh, dw), (rlp, _, rdh, rdw) = run_both(hidden, weight, labels, 1.3,
                                                     return_entropy=False)
    assert ent is None and seen == [False]
    assert (lp.double() - rlp).abs().max() <= 1e-5
    assert rel_err(dh, rdh) <= 1e-5 and rel_err(dw, rdw) <= 1e-5


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 70), h=st.integers(1, 24), v=st.integers(1, 300),
       token_chunk=st.sampled_from([1, 7, 64]), vocab_chunk=st.sampled_from([1, 13, 128, 4096]),
       temperature=st.sampled_from([0.5, 1.0, 2.0]), seed=st.integers(0, 10_000))
def test_chunking_never_changes_the_result(n, h, v, token_chunk, vocab_chunk, temperature, seed):
    """Any N (incl. 1), V not a multiple of the chunk, V < chunk: same stats and grads."""
    hidden, weight, labels = make(n, h, v, seed=seed)
    labels = torch.where(labels % 5 == 0, torch.full_like(labels, -1), labels)  # other shard
    inv_t = 1.0 / temperature
    stats = torch_chunked.forward_stats(hidden, weight, labels, inv_t, True,
                                        token_chunk=token_chunk, vocab_chunk=vocab_chunk)
    z = (hidden.double() @ weight.double().T) * inv_t
    row_max = z.max(1).values
    e = torch.exp(z - row_max[:, None])
    expected = torch.stack([row_max, e.sum(1), (e * (z - row_max[:, None])).sum(1),
                            torch.where(labels >= 0, z.gather(1, labels.clamp(min=0)[:, None])
                                        .squeeze(1), torch.zeros_like(row_max))], 1)
    torch.testing.assert_close(stats.double(), expected, rtol=1e-5, atol=1e-5)
    # fp32 sums in another order: 1e-4 of the largest entry covers cancellation between
    # the softmax and label terms; accuracy against fp64 is tested above at 1e-5
    close = lambda a, b: (a - b).abs().max() <= 1e-4 * max(1.0, b.abs().max())  # noqa: E731

    lse = (row_max + e.sum(1).log()).float()
    mean_z = ((e * z).sum(1) / e.sum(1)).float()
    lse, mean_z = lse.reshape(n), mean_z.reshape(n)
    gen = torch.Generator().manual_seed(seed)
    g_lp, g_h = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    dh, dw = torch_chunked.backward(hidden, weight, labels, inv_t, lse, mean_z, g_lp, g_h,
                                    token_chunk=token_chunk, vocab_chunk=vocab_chunk)
    dh_ref, dw_ref = torch_chunked.backward(hidden, weight, labels, inv_t, lse, mean_z, g_lp,
                                            g_h, token_chunk=10 ** 6, vocab_chunk=10 ** 6)
    assert close(dh, dh_ref) and close(dw, dw_ref)


def _peak_extra(n: int, vocab: int, mode: str) -> int:
    """Peak of live allocator bytes above the inputs (torch's profiler: deterministic,
    unlike the process's RSS, which depends on what malloc kept from earlier work)."""
    from megatron_overlay.utils.memory import PeakTensorMemory

    hidden, weight = torch.randn(n, 64), torch.randn(vocab, 64)
    labels = torch.randint(0, vocab, (n,))
    with torch.no_grad(), PeakTensorMemory("cpu") as peak:
        if mode == "fused":
            linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
        else:
            logp = torch.log_softmax((hidden @ weight.T) / 0.7, dim=-1)
            logp.gather(1, labels[:, None])
            (logp.exp() * logp).sum(-1)
    return peak.extra_bytes


def test_forward_memory_does_not_grow_with_vocab():
    """Fused: O(N + chunk) whatever V; the materialized path grows with N x V."""
    n = 4096
    small, large = _peak_extra(n, 8192, "fused"), _peak_extra(n, 65536, "fused")
    materialized = _peak_extra(n, 65536, "materialized")
    logits_bytes = n * 65536 * 4  # 1 GiB
    assert materialized > logits_bytes  # the measurement sees big allocations
    tile_bytes = 1024 * 4096 * 4  # one fp32 tile: 16 MiB
    assert large < 8 * tile_bytes, large  # a few tiles, far below the 1 GiB of logits
    assert large - small < 2 * tile_bytes, (small, large)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(temperature=0.0), ValueError, "temperature must be finite and > 0"),
    (dict(temperature=-1.0), ValueError, "temperature must be finite and > 0"),
    (dict(temperature=float("inf")), ValueError, "temperature must be finite and > 0"),
    (dict(temperature=None), TypeError, "temperature must be a float"),
    (dict(return_entropy="yes"), TypeError, "return_entropy must be a bool"),
    (dict(ignore_index=1.5), TypeError, "ignore_index must be an int"),
    # beyond int64 (the labels' widest dtype): an OverflowError from the compare before
    (dict(ignore_index=2 ** 70), ValueError, "ignore_index must fit int64"),
    (dict(ignore_index=-2 ** 63 - 1), ValueError, "ignore_index must fit int64"),
    (dict(strict_labels=1), TypeError, "strict_labels must be a bool or None, got int"),
    # an int beyond every float: an OverflowError from the compare before
    (dict(temperature=10 ** 400), ValueError, r"temperature must be <= 2\^66"),
    (dict(temperature=-10 ** 400), ValueError, "temperature must be finite and > 0"),
    # not a process group: an AttributeError from deep in torch.distributed before
    (dict(tp_group="tp"), TypeError, "tp_group must be None or a torch.distributed "
                                     "ProcessGroup"),
    (dict(tp_group=0), TypeError, "tp_group must be None or a torch.distributed"),
])
def test_bad_options_raise(kwargs, error, text):
    hidden, weight, labels = make(4, 8, 16)
    with pytest.raises(error, match=text):
        linear_logprob_entropy(hidden, weight, labels, **kwargs)


def test_cached_options_still_refuse_what_equals_a_good_one():
    """LogprobParams.of answers a repeat of good options from its cache: 1 == True and
    1.0 == 1 in Python (and hash alike), but return_entropy=1 and strict_labels=1 must
    still raise after True was taken, and a float temperature be kept as a float."""
    from megatron_overlay.ops.params import LogprobParams
    hidden, weight, labels = make(4, 8, 16)
    good = LogprobParams.of(temperature=1.0, return_entropy=True, strict_labels=True)
    assert LogprobParams.of(temperature=1.0, return_entropy=True, strict_labels=True) is good
    linear_logprob_entropy(hidden, weight, labels, return_entropy=True, strict_labels=True)
    with pytest.raises(TypeError, match="return_entropy must be a bool"):
        linear_logprob_entropy(hidden, weight, labels, return_entropy=1, strict_labels=True)
    with pytest.raises(TypeError, match="strict_labels must be a bool or None, got int"):
        linear_logprob_entropy(hidden, weight, labels, return_entropy=True, strict_labels=1)
    as_int = LogprobParams.of(temperature=1, return_entropy=True, strict_labels=True)
    assert as_int is not good and as_int == LogprobParams(temperature=1, strict_labels=True)
    for bad in (0.0, float("nan")):  # refused each time: a failed check caches nothing
        for _ in range(2):
            with pytest.raises(ValueError, match="temperature must be finite and > 0"):
                LogprobParams.of(temperature=bad)
    # a tensor temperature is checked afresh every call (its values may have changed)
    temps = torch.full((4,), 0.5)
    LogprobParams.of(temperature=temps)
    temps[1] = -1.0
    with pytest.raises(ValueError, match="temperature"):
        LogprobParams.of(temperature=temps)


def test_bad_options_of_the_distill_ops_raise():
    from megatron_overlay.ops import linear_logprobs_at, linear_topk_logprobs
    hidden, weight, labels = make(4, 8, 16)
    ids = labels[:, None].repeat(1, 3)
    with pytest.raises(TypeError, match="tp_group must be None or a torch.distributed"):
        linear_topk_logprobs(hidden, weight, 2, tp_group=object())
    with pytest.raises(TypeError, match="tp_group must be None or a torch.distributed"):
        linear_logprobs_at(hidden, weight, ids, tp_group="x")
    # strict_ids as strict_labels: a bool or None ("no" was read as strict before)
    with pytest.raises(TypeError, match="strict_ids must be a bool or None, got str"):
        linear_logprobs_at(hidden, weight, ids, strict_ids="no")


def test_numpy_bools_are_bools():
    """A flag read from a numpy config (np.bool_) is a bool, as numpy's ints and floats are
    ints and floats here; the error for a wrong type names its module."""
    np = pytest.importorskip("numpy")
    hidden, weight, labels = make(4, 8, 16)
    ref = linear_logprob_entropy(hidden, weight, labels, return_entropy=False)
    got = linear_logprob_entropy(hidden, weight, labels, return_entropy=np.bool_(False),
                                 strict_labels=np.bool_(True))
    assert torch.equal(got[0], ref[0]) and got[1] is None and ref[1] is None
    with pytest.raises(TypeError, match=r"return_entropy must be a bool, got numpy\.int64"):
        linear_logprob_entropy(hidden, weight, labels, return_entropy=np.int64(1))


@pytest.mark.parametrize("variable, value, text", [
    ("MEGATRON_OVERLAY_IMPL", "trition", "MEGATRON_OVERLAY_IMPL='trition': set it to 'torch'"),
    ("MEGATRON_OVERLAY_STRICT_LABELS", "maybe",
     "MEGATRON_OVERLAY_STRICT_LABELS='maybe': set it to 1 or 0"),
    ("MEGATRON_OVERLAY_BATCH_INVARIANT", "flase",
     "MEGATRON_OVERLAY_BATCH_INVARIANT='flase': set it to 1 or 0"),
])
def test_a_misspelled_environment_variable_is_refused(monkeypatch, variable, value, text):
    """A typo silently picked the default (the torch stages; the deferred label check)."""
    hidden, weight, labels = make(4, 8, 16)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=text):
        linear_logprob_entropy(hidden, weight, labels)


@pytest.mark.parametrize("value, strict", [("1", True), ("true", True), ("YES", True),
                                           (" on ", True), ("0", False), ("false", False),
                                           ("off", False), ("", False)])
def test_the_switches_read_the_usual_spellings(monkeypatch, value, strict):
    from megatron_overlay.ops import batch_invariance, label_check
    monkeypatch.setenv("MEGATRON_OVERLAY_STRICT_LABELS", value)
    assert label_check.strict_mode(None) is strict
    assert label_check.strict_mode(False) is False  # the argument wins
    monkeypatch.setenv("MEGATRON_OVERLAY_BATCH_INVARIANT", value)
    assert batch_invariance.enabled() is (strict or value == "")  # unset / empty: on


def test_the_settings_follow_the_environment_however_it_changes(monkeypatch):
    """env_flags reads os.environ's own mapping and keeps parsed values: each read still
    sees the environment as it is now (set, changed, deleted, set again to a value seen
    before, set to a bad value after a good one)."""
    import os
    from megatron_overlay.ops.env_flags import env_flag, env_value
    name = "MEGATRON_OVERLAY_TEST_SETTING"
    monkeypatch.delenv(name, raising=False)
    assert env_value(name) == "" and env_flag(name, True, "t") is True
    os.environ[name] = " Off "
    assert env_value(name) == " Off " and env_flag(name, True, "t") is False
    os.environ.update({name: "yes"})
    assert env_flag(name, False, "t") is True
    del os.environ[name]
    assert env_value(name) == "" and env_flag(name, False, "t") is False
    monkeypatch.setenv(name, " Off ")  # a value parsed before
    assert env_flag(name, True, "t") is False
    monkeypatch.setenv(name, "offf")
    for _ in range(2):  # refused every time, never cached
        with pytest.raises(ValueError, match=f"{name}='offf': set it to 1 or 0"):
            env_flag(name, True, "t")
    monkeypatch.setenv(name, "caf\u00e9")  # a non-ASCII value, decoded as os.environ does
    assert env_value(name) == os.environ[name]


@pytest.mark.parametrize("mutate, error, text", [
    (lambda h, w, y: (h[:, :-1], w, y), ValueError, "hidden size mismatch"),
    (lambda h, w, y: (h[0], w, y), ValueError, "hidden must be a 2-D"),
    (lambda h, w, y: (h.double(), w.double(), y), TypeError, "float32, bfloat16 or float16"),
    (lambda h, w, y: (h.bfloat16(), w.half(), y), TypeError, "or one of them be float32"),
    (lambda h, w, y: (h, w, y.float()), TypeError, "labels must be an int64"),
    (lambda h, w, y: (h, w, y[:-1]), ValueError, "labels must have shape"),
    (lambda h, w, y: (h, w, y + 16), ValueError, "labels out of range"),
    (lambda h, w, y: (h, w, y - 20), ValueError, "labels out of range"),
])
def test_bad_inputs_raise(mutate, error, text):
    hidden, weight, labels = mutate(*make(4, 8, 16))
    with pytest.raises(error, match=text):
        linear_logprob_entropy(hidden, weight, labels)

