"""A backward asked for one gradient: the other is not computed (its GEMM is a third of the
backward's work: a frozen head, or hidden states that need no gradient) and the one asked
for is the full backward's, bit for bit. All three ops, CPU (the chunked torch path); the
Triton stage's own flags: test_triton_interpreter.py ("needs-" cases) and, on GPU,
test_triton_gpu.py."""

from __future__ import annotations

import pytest
import torch

from megatron_overlay.ops import (linear_logprob_entropy, linear_logprobs_at,
                                  linear_topk_logprobs, torch_chunked)

N, H, V = 37, 24, 301


def _inputs(dtype):
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(N, H, generator=g).to(dtype)
    weight = (torch.randn(V, H, generator=g) / H ** 0.5 * 4).to(dtype)
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::5] = -100
    ids = torch.randint(0, V, (N, 3), generator=g)
    return hidden, weight, labels, ids


def _loss(op, hidden, weight, labels, ids):
    coef = torch.linspace(-1, 1, N)
    if op == "logprob":
        lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
        return (lp * coef).sum() + (ent * coef.flip(0)).sum()
    if op == "at":
        lp, ent = linear_logprobs_at(hidden, weight, ids, temperature=0.7, return_entropy=True)
        return (lp * coef[:, None]).sum() + ent.sum()
    out = linear_topk_logprobs(hidden, weight, 4, temperature=0.7, labels=labels,
                               return_entropy=True)
    return (out.topk_log_probs * coef[:, None]).sum() + (out.log_probs * coef).sum() \
        + out.entropy.sum()


def _grads(op, data, wants):
    hidden, weight, labels, ids = data
    h = hidden.clone().requires_grad_(wants[0])
    w = weight.clone().requires_grad_(wants[1])
    _loss(op, h, w, labels, ids).backward()
    return h.grad, w.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["logprob", "at", "topk"])
def test_one_gradient_is_the_full_backwards(op, dtype):
    data = _inputs(dtype)
    full_h, full_w = _grads(op, data, (True, True))
    only_h, none_w = _grads(op, data, (True, False))
    none_h, only_w = _grads(op, data, (False, True))
    assert none_w is None and none_h is None
    assert only_h.dtype == full_h.dtype == dtype and only_w.dtype == full_w.dtype == dtype
    assert torch.equal(only_h, full_h)
    assert torch.equal(only_w, full_w)


def test_stage_skips_the_gradient_not_asked_for():
    hidden, weight, labels, _ = _inputs(torch.float32)
    stats = torch_chunked.forward_stats(hidden, weight, labels.clamp(min=-1), 1.0, True)
    lse, mean_z = stats[:, 0] + stats[:, 1].log(), stats[:, 0] + stats[:, 2] / stats[:, 1]
    g = torch.linspace(-1, 1, N)
    args = (hidden, weight, labels.clamp(min=-1), 1.0, lse, mean_z, g, g.flip(0))
    full = torch_chunked.backward(*args)
    assert torch.equal(torch_chunked.backward(*args, need_d_weight=False)[0], full[0])
    assert torch_chunked.backward(*args, need_d_weight=False)[1] is None
    assert torch.equal(torch_chunked.backward(*args, need_d_hidden=False)[1], full[1])
    assert torch_chunked.backward(*args, need_d_hidden=False)[0] is None
    assert torch_chunked.backward(*args, need_d_hidden=False, need_d_weight=False) == \
        (None, None)


@pytest.mark.parametrize("op", ["logprob", "at", "topk"])
def test_ops_ask_the_stage_for_the_needed_gradients_only(op, monkeypatch):
    asked = []
    stage = torch_chunked.backward

    def spy(*args, **kwargs):
        asked.append((kwargs["need_d_hidden"], kwargs["need_d_weight"]))
        return stage(*args, **kwargs)

    monkeypatch.setattr(torch_chunked, "backward", spy)
    data = _inputs(torch.float32)
    for wants in ((True, False), (False, True), (True, True)):
        _grads(op, data, wants)
    assert asked == [(True, False), (False, True), (True, True)]
