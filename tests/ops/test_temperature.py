"""Per-sample / per-token temperature in the fused op (chunked torch path) against fp64."""

from __future__ import annotations

import pytest
import torch

from megatron_overlay.ops import linear_logprob_entropy, torch_chunked
from megatron_overlay.ops.temperature import (MAX_TEMPERATURE, check_temperature_values,
                                              inverse_temperature, rows_from_batch_seq)

from .test_fused_ops import make, reference_from_z


def _grads_of(fn, hidden, weight, coeffs):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = fn(h, w)
    ((lp * coeffs[0]).sum() + (ent * coeffs[1]).sum()).backward()
    return lp.detach(), ent.detach(), h.grad, w.grad


def test_per_token_temperature_matches_fp64_row_by_row():
    hidden, weight, labels = make(37, 24, 700, seed=3, ignore_every=7)
    temps = torch.linspace(0.3, 2.5, 37)
    coeffs = torch.randn(2, 37, generator=torch.Generator().manual_seed(5))
    lp, ent, dh, dw = _grads_of(
        lambda h, w: linear_logprob_entropy(h, w, labels, temperature=temps), hidden, weight,
        coeffs)

    def ref(h, w):  # fp64, each row at its own temperature
        z = (h @ w.T) / temps.double()[:, None]
        return reference_from_z(z, labels)

    rlp, rent, rdh, rdw = _grads_of(ref, hidden.double(), weight.double(), coeffs.double())
    assert (lp.double() - rlp).abs().max() <= 1e-5
    assert (ent.double() - rent).abs().max() <= 1e-5
    assert (dh.double() - rdh).abs().max() <= 1e-5 * rdh.abs().max()
    assert (dw.double() - rdw).abs().max() <= 1e-5 * rdw.abs().max()


def test_uniform_tensor_equals_the_float_bitwise():
    """A 0-d tensor and a constant [N] tensor give exactly the float's results."""
    hidden, weight, labels = make(20, 16, 300, seed=1)
    by_float = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    for t in (torch.tensor(0.7), torch.full((20,), 0.7)):
        got = linear_logprob_entropy(hidden, weight, labels, temperature=t)
        assert torch.equal(got[0], by_float[0]) and torch.equal(got[1], by_float[1])


def test_stages_accept_a_row_tensor_in_every_chunking():
    hidden, weight, labels = make(50, 8, 90, seed=2)
    inv_t = torch.rand(50) + 0.5
    full = torch_chunked.forward_stats(hidden, weight, labels, inv_t, True,
                                       token_chunk=10 ** 6, vocab_chunk=10 ** 6)
    tiled = torch_chunked.forward_stats(hidden, weight, labels, inv_t, True,
                                        token_chunk=7, vocab_chunk=13)
    assert torch.allclose(full, tiled, atol=1e-5, rtol=1e-5)
    z = (hidden @ weight.T) * inv_t[:, None]
    assert torch.allclose(full[:, 0], z.max(1).values)


def test_processor_shapes_flatten_to_s_major_rows():
    b, s = 3, 4
    per_token = torch.arange(b * s, dtype=torch.float32).reshape(b, s) + 1
    rows = rows_from_batch_seq(per_token, b, s)
    assert rows.view(s, b)[2, 1] == per_token[1, 2]  # row (seq 2, batch 1)
    per_sample = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(rows_from_batch_seq(per_sample, b, s).view(s, b)[3], per_sample)
    assert rows_from_batch_seq(0.5, b, s) == 0.5


@pytest.mark.parametrize("temperature, error, text", [
    (torch.tensor([0.5, 0.0, 1.0, 1.0]), ValueError,
     "finite and > 0 everywhere, got 0.0 at flat index 1"),
    (torch.tensor([0.5, float("nan"), 1.0, 1.0]), ValueError, "finite and > 0 everywhere"),
    (torch.tensor([0.5, 1.0, -2.0, 1.0]), ValueError, "finite and > 0 everywhere"),
    (torch.tensor([0.5, 1.0, float("inf"), 1.0]), ValueError, "finite and > 0 everywhere"),
    (torch.tensor([1, 2, 3, 4]), TypeError, "floating-point tensor"),
    (torch.ones(3), ValueError, r"an \[N\] = \[4\] tensor"),
    (torch.ones(4, 1), ValueError, r"an \[N\] = \[4\] tensor"),
])
def test_bad_temperature_tensors_raise(temperature, error, text):
    hidden, weight, labels = make(4, 8, 16)
    with pytest.raises(error, match=text):
        linear_logprob_entropy(hidden, weight, labels, temperature=temperature)


def test_bad_processor_temperature_shape_names_the_forms():
    with pytest.raises(ValueError, match=r"\[batch\] = \[2\] tensor .* \[batch, seq\] = \[2, 3\]"):
        rows_from_batch_seq(torch.ones(3, 2), 2, 3)


def test_bad_entries_poison_their_rows_on_the_no_sync_path():
    """What CUDA gets (no host check): NaN inverse temperature, so NaN outputs on that row."""
    inv = inverse_temperature(torch.tensor([0.5, 0.0, -1.0, float("nan"), 2.0]), 5,
                              torch.device("cpu"))
    assert torch.isnan(inv[1:4]).all() and torch.equal(inv[[0, 4]], torch.tensor([2.0, 0.5]))
    with pytest.raises(ValueError, match="flat index 1"):
        check_temperature_values(torch.tensor([1.0, 0.0]))


def test_inverse_poisons_exactly_the_invalid_entries():
    """NaN for every entry outside [fp32's smallest normal number, MAX_TEMPERATURE] (+-0,
    +-inf, NaN, negatives, subnormals: their fp32 inverse is inf; above 2^66, the kernels'
    range), 1 / t for every other, both bounds (1 / t = 2^126 and 2^-66) included."""
    tiny, big = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max
    above = torch.nextafter(torch.tensor(MAX_TEMPERATURE), torch.tensor(big)).item()
    t = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1e-30, -big,
                      1e-45, 2.9e-39, tiny, 0.7, 1.0, MAX_TEMPERATURE, above, 3e38, big])
    inv = inverse_temperature(t, t.numel(), t.device)
    valid = torch.isfinite(t) & (t >= tiny) & (t <= MAX_TEMPERATURE)
    assert valid.sum() == 4 and inv[12] == 2.0 ** -66
    assert inv.dtype == torch.float32 and inv.is_contiguous()
    assert torch.equal(inv.isnan(), ~valid)
    assert torch.equal(inv[valid], t[valid].reciprocal()) and inv[valid].isfinite().all()
    # other floating dtypes are read as fp32
    assert torch.equal(inverse_temperature(t[10:13].to(torch.bfloat16), 3, t.device),
                       t[10:13].to(torch.bfloat16).float().reciprocal())


def test_a_temperature_that_requires_grad_is_refused():
    """No gradient flows to the temperature (an option, not an input): a tensor asking for
    one is refused, where its .grad stayed None without a word; detached, it is taken."""
    hidden, weight, labels = make(6, 8, 16)
    temps = torch.full((6,), 0.9, requires_grad=True)
    with pytest.raises(ValueError, match=r"temperature requires grad.*temperature\.detach\(\)"):
        linear_logprob_entropy(hidden, weight, labels, temperature=temps)
    lp, _ = linear_logprob_entropy(hidden.requires_grad_(), weight, labels,
                                   temperature=temps.detach())
    lp.sum().backward()
    assert temps.grad is None and hidden.grad is not None
    # where no gradient is asked for (rollout, eval: a Parameter's value), it is taken
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            got, _ = linear_logprob_entropy(hidden, weight, labels, temperature=temps)
        assert torch.equal(got, lp.detach())


def test_numpy_scalars_are_floats():
    """A temperature read from a numpy config (np.float32 / np.float64) is a float."""
    np = pytest.importorskip("numpy")
    hidden, weight, labels = make(6, 8, 40)
    ref = linear_logprob_entropy(hidden, weight, labels, temperature=0.75)
    for t in (np.float32(0.75), np.float64(0.75)):
        got = linear_logprob_entropy(hidden, weight, labels, temperature=t)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_an_entry_positive_in_fp64_but_zero_in_fp32_is_refused():
    """The ops take the temperature in fp32: an fp64 1e-50 is 0 there (its rows were NaN
    without an error on CPU, where the ValueError is promised)."""
    hidden, weight, labels = make(4, 8, 16)
    t = torch.tensor([1.0, 1e-50, 1.0, 1.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"finite and >= 1.175e-38 everywhere in fp32 "
                                         r"\(fp32's smallest normal number: its inverse must "
                                         r"be finite\), got 1e-50 at flat index 1"):
        linear_logprob_entropy(hidden, weight, labels, temperature=t)


@pytest.mark.parametrize("temperature", [1e-39, 1e-45, 5e-324])
def test_a_temperature_whose_fp32_inverse_overflows_is_refused(temperature):
    """Positive but below fp32's smallest normal number: 1 / T is inf in fp32 and every row
    was NaN without an error. A float, and a CPU tensor's entry, are refused alike."""
    hidden, weight, labels = make(4, 8, 16)
    with pytest.raises(ValueError, match=r"temperature must be >= 1.175e-38 \(fp32's smallest "
                                         r"normal number"):
        linear_logprob_entropy(hidden, weight, labels, temperature=temperature)
    with pytest.raises(ValueError, match="everywhere in fp32"):
        linear_logprob_entropy(hidden, weight, labels,
                               temperature=torch.tensor([1.0, temperature, 1.0, 1.0],
                                                        dtype=torch.float64))
    # the smallest normal itself is taken: finite outputs
    tiny = torch.finfo(torch.float32).tiny
    lp, ent = linear_logprob_entropy(hidden * 1e-40, weight, labels, temperature=tiny)
    assert lp.isfinite().all() and ent.isfinite().all()


def test_a_cpu_scalar_temperature_is_taken_on_any_device():
    """A 0-d CPU tensor is a scalar (as in torch's own ops): read on the host, no device
    copy; on the CPU itself it stays the tensor path. Both give the float's results."""
    from megatron_overlay.ops.temperature import inverse_temperature
    assert inverse_temperature(torch.tensor(0.5), 3, torch.device("meta")) == 2.0
    assert inverse_temperature(torch.tensor(0.5, dtype=torch.float64), 3,
                               torch.device("meta")) == 2.0
    on_cpu = inverse_temperature(torch.tensor(0.5), 3, torch.device("cpu"))
    assert isinstance(on_cpu, torch.Tensor) and torch.equal(on_cpu, torch.full((3,), 2.0))
    with pytest.raises(ValueError, match="temperature is on cpu but the hidden states are on"):
        inverse_temperature(torch.full((3,), 0.5), 3, torch.device("meta"))


@pytest.mark.parametrize("value", [1e39, 1e33, 2.0 ** 66 * 1.5])
def test_a_temperature_above_the_kernels_range_is_refused(value):
    """Above 2^66 (at 1e33 the Triton kernels' padded vocab columns counted as entries; an
    fp64 1e39 is inf in fp32): a float, an int beyond any float, and a tensor entry alike."""
    hidden, weight, labels = make(4, 8, 16)
    with pytest.raises(ValueError, match=r"temperature must be <= 2\^66 ~ 7.38e\+19"):
        linear_logprob_entropy(hidden, weight, labels, temperature=value)
    t = torch.tensor([1.0, value, 1.0, 1.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"at most 2\^66 ~ 7.38e\+19 everywhere .*, got "
                                         r"[0-9.e+]+ at flat index 1"):
        linear_logprob_entropy(hidden, weight, labels, temperature=t)
    with pytest.raises(ValueError, match=r"temperature must be <= 2\^66"):  # beyond floats
        linear_logprob_entropy(hidden, weight, labels, temperature=10 ** 400)
    # the bound itself is taken: the uniform distribution over the 16 ids
    lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=2.0 ** 66)
    expect = -torch.log(torch.tensor(16.0))
    assert torch.allclose(lp, expect.expand(4)) and torch.allclose(ent, -expect.expand(4))
