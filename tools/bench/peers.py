"""The other fused output-layer kernels, called the way their users call them, each asked
for the quantity closest to ours at the same temperature. Each is optional: constructing
one raises ImportError when its package is absent.

Temperature: verl and Liger's scaled-CE take it. cut-cross-entropy and Liger's FLCE do not;
they get ``hidden / T`` (one [N, H] scale, inside the timed call), so that their softmax is
the same distribution as everyone else's. This matters for speed, not only for accuracy:
cut-cross-entropy's backward skips the vocab blocks whose softmax is negligible, and at
T = 1 this benchmark's logits (std ~1.4 instead of ~2) leave it far fewer blocks to skip.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch

from .methods import Method, input_grads

_VERL = []


def _load_verl():
    """verl's two kernel files, without verl's package __init__ (it imports ray and more)."""
    if _VERL:
        return _VERL[0]
    spec = importlib.util.find_spec("verl")
    if spec is None:
        raise ImportError("verl is not installed")
    root = Path(spec.submodule_search_locations[0])
    for name, path in (("verl", root), ("verl.utils", root / "utils"),
                       ("verl.utils.kernel", root / "utils" / "kernel")):
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]
        sys.modules[name] = mod
    device = types.ModuleType("verl.utils.device")
    device.is_cuda_available = torch.cuda.is_available()
    device.get_device_name = lambda: "cuda"
    device.get_torch_device = lambda: torch.cuda
    device.get_device_capability = lambda *a: torch.cuda.get_device_capability()
    device.get_device_id = lambda: torch.cuda.current_device()
    sys.modules["verl.utils.device"] = device
    from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy
    _VERL.append(linear_cross_entropy)
    return linear_cross_entropy


class Verl(Method):
    name, outputs = "verl", "logprob+entropy"

    def __init__(self):
        self.op = _load_verl()

    def fwd(self, h, w, y):
        return self.op(h, w, y, self.temperature, "none")


class LigerScaledCE(Method):
    """Liger-Kernel's fused linear scaled cross-entropy (log-prob + entropy, temperature):
    its SM90 CuTe-DSL kernels on Hopper when nvidia-cutlass-dsl is importable."""
    name, outputs = "liger_scaled_ce", "logprob+entropy"

    def __init__(self):
        from liger_kernel.ops.fused_linear_scaled_cross_entropy import (
            LigerFusedLinearScaledCrossEntropyFunction,
        )
        self.fn = LigerFusedLinearScaledCrossEntropyFunction
        if importlib.util.find_spec("cutlass") is None:
            self.outputs += " (no nvidia-cutlass-dsl: its sm_90 path cannot load)"

    def fwd(self, h, w, y):
        nll, entropy = self.fn.apply(h, w, y, self.temperature, -100, 1, True)
        return -nll.float(), entropy.float()


class LigerFLCE(Method):
    """Liger's fused linear cross-entropy: a scalar mean loss (gradients computed in its
    forward when the inputs require grad). No per-token outputs: fwd returns none."""
    name, outputs = "liger_flce", "mean NLL (scalar)"

    def __init__(self):
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
        self.fn = LigerFusedLinearCrossEntropyFunction

    def _loss(self, h, w, y):
        out = self.fn.apply(h / self.temperature, w, y)
        return out[0] if isinstance(out, tuple) else out

    def fwd(self, h, w, y):
        self._loss(h, w, y)
        return None, None

    def fb(self, h, w, y, a, b):
        return input_grads(h, w, lambda h, w: self._loss(h, w, y))


class CCE(Method):
    """cut-cross-entropy's per-token NLL (reduction="none"): log-prob only, so its fb loss
    is sum(a * logprob)."""
    name, outputs = "cce", "logprob"

    def __init__(self):
        from cut_cross_entropy import linear_cross_entropy
        self.op = linear_cross_entropy

    def fwd(self, h, w, y):
        return -self.op(h / self.temperature, w, y, reduction="none").float(), None


PEERS = {"verl": Verl, "liger_scaled_ce": LigerScaledCE, "liger_flce": LigerFLCE, "cce": CCE}


class CCEFrozenWeight(CCE):
    """cce with the weight frozen (d_hidden only): its backward without the d_weight
    atomics. Not comparable with the others' fb (they return both gradients)."""
    name, outputs = "cce_frozen_w", "logprob, d_hidden only"

    def fb(self, h, w, y, a, b):
        h = h.detach().requires_grad_()
        (self.fwd(h, w, y)[0] * a).sum().backward()
        return h.grad, None


PEERS["cce_frozen_w"] = CCEFrozenWeight
