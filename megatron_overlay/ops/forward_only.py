"""Calling an op's autograd Function without autograd when no gradient can flow.

``Function.apply`` costs the host ~7 us a call on the CPU machine (twice that on an H200
host: docs/BENCHMARKS.md, pass 7) even under ``torch.no_grad()``: it builds a graph node
and its context. The forward-only calls (an RL step's reference and old-policy log-probs,
a teacher's top-k) need neither, and a synchronized call waits for every microsecond the
host spends before its first kernel. ``call`` runs the Function's ``forward`` directly
with a stand-in context then; the outputs are the same tensors (no input requires a
gradient, so ``apply`` would have returned them as they are, detached from any graph).
"""

from __future__ import annotations

import torch
from torch.autograd import forward_ad


class ForwardOnlyContext:
    """What the ops' ``forward`` uses of an autograd context, where nothing is saved."""

    def __init__(self, n_inputs: int):
        self.needs_input_grad = (False,) * n_inputs

    def save_for_backward(self, *tensors) -> None:
        pass

    def mark_non_differentiable(self, *tensors) -> None:
        pass


# torch.cuda.current_device() without its Python wrapper's lazy-init check (CUDA is
# initialized wherever a CUDA tensor exists): 0.17 against 0.44 us on an H100 host
# (docs/BENCHMARKS.md, pass 28, r2); the public function where torch lacks the binding.
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def call(function: type[torch.autograd.Function], hidden: torch.Tensor, weight: torch.Tensor,
         *args):
    """``function.apply(hidden, weight, *args)``, through autograd only where a gradient
    can reach ``hidden`` or ``weight`` (the ops' only differentiable inputs), or forward
    AD is on (``apply`` refuses it: the ops have no jvp, and the kernels would drop the
    tangents silently).

    On the hidden states' CUDA device: the kernels launch on the current device's stream
    (Triton's launcher, as ours), so with the tensors on another GPU they would run there
    and read across devices (as torch's ops do, the device is switched for the call)."""
    if hidden.is_cuda and hidden.get_device() != _current_device():
        with torch.cuda.device(hidden.device):
            return call(function, hidden, weight, *args)
    if (torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)) or (
            forward_ad._current_level >= 0):
        return function.apply(hidden, weight, *args)
    return function.forward(ForwardOnlyContext(2 + len(args)), hidden, weight, *args)
