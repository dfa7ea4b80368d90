"""The ops' gradients are first order: a second-order gradient raises instead of coming out wrong.

Each op's backward computes its gradients from statistics its forward saved (lse, E[z])
as constants, so a graph built through the backward (``create_graph=True``: a gradient
penalty, a Hessian-vector product) would miss their dependence on hidden and weight and
give wrong second derivatives without a word (2-10% off on small cases). The autograd
engine runs a backward with grad mode on exactly when ``create_graph`` is set, so
``first_order`` refuses that case by name; ``torch.autograd.function.once_differentiable``
would instead return a first-order gradient detached from any graph, which a loss that
adds it to differentiable terms then treats as a constant, silently.
"""

from __future__ import annotations

import functools

import torch


def first_order(backward):
    """Decorates an autograd Function's ``backward`` (inside ``@staticmethod``)."""
    @functools.wraps(backward)
    def first_order_backward(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "the fused log-prob ops have first-order gradients only: backward with "
                "create_graph=True (a second-order gradient) is not supported; compute "
                "that term through the materialized logits instead")
        return backward(ctx, *grads)
    return first_order_backward
