"""ops/forward_only.py: the ops skip autograd where no gradient can reach hidden or weight,
and give the same tensors as through autograd (CPU, the torch stages)."""

from __future__ import annotations

import pytest
import torch

from megatron_overlay import ops
from megatron_overlay.ops import LinearLogprobEntropy, LinearLogprobsAt, LinearTopkLogprobs

N, H, V = 24, 16, 96


def _inputs():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(N, H, generator=g)
    weight = torch.randn(V, H, generator=g) * 0.5
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::5] = -100
    ids = torch.randint(0, V, (N, 3), generator=g)
    return hidden, weight, labels, ids


def _calls(hidden, weight, labels, ids):
    return {
        LinearLogprobEntropy: lambda: ops.linear_logprob_entropy(hidden, weight, labels,
                                                                 temperature=0.7),
        LinearLogprobsAt: lambda: ops.linear_logprobs_at(hidden, weight, ids, temperature=0.7,
                                                         return_entropy=True),
        LinearTopkLogprobs: lambda: tuple(ops.linear_topk_logprobs(
            hidden, weight, 4, temperature=0.7, labels=labels, return_entropy=True)),
    }


@pytest.mark.parametrize("function", [LinearLogprobEntropy, LinearLogprobsAt,
                                      LinearTopkLogprobs], ids=lambda f: f.__name__)
def test_no_autograd_without_a_gradient_to_compute(monkeypatch, function):
    hidden, weight, labels, ids = _inputs()
    through_autograd = _calls(hidden.requires_grad_(), weight, labels, ids)[function]()
    assert any(t.grad_fn is not None for t in through_autograd if t is not None
               and t.is_floating_point())

    def refuse(*args):
        raise AssertionError("Function.apply called where no gradient can flow")

    monkeypatch.setattr(function, "apply", refuse)
    hidden = hidden.detach()
    with torch.no_grad():  # an RL step's reference log-probs
        got_no_grad = _calls(hidden, weight, labels, ids)[function]()
    got_frozen = _calls(hidden, weight, labels, ids)[function]()  # grad on, nothing needs it
    for got in (got_no_grad, got_frozen):
        for a, b in zip(got, through_autograd):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.grad_fn is None and not a.requires_grad
                assert torch.equal(a, b.detach()), "the same tensors as through autograd"


def test_a_gradient_still_flows_when_asked_for():
    hidden, weight, labels, _ = _inputs()
    weight.requires_grad_()  # the head only (frozen trunk): autograd must still run
    lp, ent = ops.linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    (lp.sum() + ent.sum()).backward()
    assert weight.grad is not None and torch.isfinite(weight.grad).all()
    assert weight.grad.abs().sum() > 0
    with torch.no_grad():
        lp2, _ = ops.linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    assert lp2.grad_fn is None and torch.equal(lp2, lp.detach())
