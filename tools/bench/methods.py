"""What every method implements, and the three that need no peer: the GEMM floor, the
materialized-logits reference, and ours (megatron_overlay.ops.linear_logprob_entropy)."""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from unittest import mock

import torch

from megatron_overlay.ops.batch_invariance import ENV as INVARIANCE_ENV
from megatron_overlay.utils.memory import PeakMemory

from .inputs import TEMPERATURE, fp32_copy

GiB = float(1 << 30)


def peak_extra_gib(fn, args, exclude_bytes: int = 0) -> float | None:
    """Peak bytes allocated during fn(*args) beyond what was allocated before it, minus
    ``exclude_bytes`` (e.g. the gradients every method must return), in GiB; None for CPU
    tensors (the caching allocator's counters are CUDA's)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or not tensors[0].is_cuda:
        return None
    gc.collect()
    torch.cuda.empty_cache()
    with PeakMemory(tensors[0].device) as peak:
        out = fn(*args)
    del out
    gc.collect()
    torch.cuda.empty_cache()
    return max(peak.extra_bytes - exclude_bytes, 0) / GiB


def input_grads(h, w, loss_of):
    """Backward of ``loss_of(h, w)`` from fresh leaves: (d_hidden, d_weight)."""
    h, w = h.detach().requires_grad_(), w.detach().requires_grad_()
    loss_of(h, w).backward()
    return h.grad, w.grad


class Method:
    """``fwd(h, w, y)`` -> (log-prob [N] fp32 or None, entropy [N] or None), no grad;
    ``fb(h, w, y, a, b)`` -> (d_hidden, d_weight) of sum(a * logprob + b * entropy)."""
    name = "?"
    outputs = "logprob+entropy"
    phases = ("fwd", "fb")  # the phases op times
    temperature = TEMPERATURE  # op --temperature sets it on each method it builds
    checked = True  # op compares its outputs with the fp64 reference of the bf16 inputs

    def grad_gib(self, n, hdim, v) -> float:
        """The two gradients every fb returns (excluded from fb_extra_gib): bf16."""
        return (n + v) * hdim * 2 / GiB

    def fwd(self, h, w, y):
        raise NotImplementedError

    def fb(self, h, w, y, a, b):
        def loss(h, w):
            lp, ent = self.fwd(h, w, y)
            return (lp * a).sum() + ((ent * b).sum() if ent is not None else 0)
        return input_grads(h, w, loss)


class Gemm(Method):
    """The floor. fwd: hidden @ W.T. fb: that, then G @ W and G.T @ hidden with G a fixed
    random normal [N, V] tensor (held between calls, not counted in the fb peak)."""
    name, outputs = "gemm", "logits only (the floor)"

    def __init__(self):
        self.grad = None

    def fwd(self, h, w, y):
        return torch.matmul(h, w.T)

    def fb(self, h, w, y, a, b):
        if self.grad is None or self.grad.shape != (h.shape[0], w.shape[0]):
            self.grad = None
            self.grad = torch.randn(h.shape[0], w.shape[0], device=h.device, dtype=h.dtype)
        torch.matmul(h, w.T)
        return torch.matmul(self.grad, w), torch.matmul(self.grad.T, h)


class Materialized(Method):
    """fp32 logits / T -> log_softmax -> gather, entropy; autograd backward."""
    name, outputs = "materialized", "logprob+entropy (fp32 logits)"

    def fwd(self, h, w, y):
        logits = (h @ w.T).float() / self.temperature
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(1, y[:, None]).squeeze(1)
        ent = -(logp.exp() * logp).sum(-1)
        return lp, ent


class Fp32Head(Materialized):
    """The head as an fp32 GEMM of fp32 copies of hidden and weight (allow_tf32 off), then
    as materialized: what a trainer with an fp32 LM head runs (NeMo-RL's fp32_lm_head). The
    bf16 head is "materialized" (bf16 GEMM, bf16 logits, fp32 softmax). Forward only."""
    name, outputs, phases, tf32 = "fp32_head", "logprob+entropy (fp32 head)", ("fwd",), False

    def fwd(self, h, w, y):
        matmul, before = torch.backends.cuda.matmul, torch.backends.cuda.matmul.allow_tf32
        matmul.allow_tf32 = self.tf32
        try:
            return super().fwd(h.float(), w.float(), y)
        finally:
            matmul.allow_tf32 = before


class Tf32Head(Fp32Head):
    """The same GEMM in TF32 (allow_tf32 on): the head NeMo-RL runs at about bf16 speed."""
    name, outputs, tf32 = "tf32_head", "logprob+entropy (TF32 head)", True


BASE_PACKAGE = "megatron_overlay_base"


def import_baseline(folder: Path) -> str:
    """Import DIR/megatron_overlay_base, the package copied from another commit (its
    imports are relative, so it runs beside this one); returns its name, for
    importlib.import_module(f"{name}.ops"). Both op and distill take it as --baseline."""
    if BASE_PACKAGE in sys.modules:
        return BASE_PACKAGE
    root = Path(folder) / BASE_PACKAGE
    spec = importlib.util.spec_from_file_location(
        BASE_PACKAGE, root / "__init__.py", submodule_search_locations=[str(root)])
    if spec is None or not (root / "__init__.py").is_file():
        raise SystemExit(f"--baseline: no {BASE_PACKAGE} package in {folder}")
    sys.modules[BASE_PACKAGE] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return BASE_PACKAGE


def read_pending_label_checks() -> None:
    """Read every label / token-id record still queued by the overlay packages imported
    (this one and a --baseline's): each op call with labels or ids queues one, which a
    later call's poll reads once the GPU has written it (ops/label_check.py). A timed
    burst starts with none pending (timing.interleaved's ``settle``), so that its first
    calls time their own enqueue, not the reading of up to MAX_PENDING records a previous
    burst left, which falls on whichever op is called next (docs/BENCHMARKS.md, pass 32).
    It waits for the GPU, as check_labels() does; after a burst's sync that is no wait."""
    for package in ("megatron_overlay", BASE_PACKAGE):
        module = sys.modules.get(package + ".ops.label_check")
        if module is not None:
            module.check_labels()


class Ours(Method):
    """The op of ``package`` (op --baseline: the copy megatron_overlay_base); ``invariant``
    False sets MEGATRON_OVERLAY_BATCH_INVARIANT=0 around each call, ``overrides`` set
    megatron_overlay.ops.kernels.autotune_configs attributes around it (e.g.
    {"BACKWARD_EXTRA_BUDGET_BYTES": 480 << 20})."""
    name, outputs = "ours", "logprob+entropy"

    def __init__(self, package="megatron_overlay", name=None, invariant=True, overrides=None,
                 phases=("fwd", "fb")):
        self.op = importlib.import_module(f"{package}.ops").linear_logprob_entropy
        self.invariant, self.overrides, self.phases = invariant, overrides or {}, phases
        self.name = name or self.name

    def _configured(self):
        stack = contextlib.ExitStack()
        if not self.invariant:
            stack.enter_context(mock.patch.dict(os.environ, {INVARIANCE_ENV: "0"}))
        if self.overrides:
            stack.enter_context(mock.patch.multiple(
                "megatron_overlay.ops.kernels.autotune_configs", **self.overrides))
        return stack

    def fwd(self, h, w, y):
        with self._configured():
            return self.op(h, w, y, temperature=self.temperature)

    def fb(self, h, w, y, a, b):
        with self._configured():  # the overrides reach the backward too
            return super().fb(h, w, y, a, b)


class OursMode(Ours):
    """ours in a precision mode (issue 18): ``logits_dtype`` (each logit rounded), or
    ``fp32`` = "hidden" / "weight": that operand as an fp32 tensor that is not bf16-exact
    (inputs.fp32_copy of the bf16 input, made once per input outside the timing). The
    fp32-operand rows are timed only (their inputs are not the reference's);
    tests/ops/test_head_precision.py checks their accuracy against fp64."""

    def __init__(self, name, logits_dtype=None, fp32=None):
        super().__init__(name=name)
        self.logits_dtype, self.fp32, self.checked = logits_dtype, fp32, fp32 is None
        self.copies = {}

    def _operands(self, h, w):
        t = h if self.fp32 == "hidden" else w
        if self.fp32 is None or t.dtype == torch.float32:  # fb's fwd gets the copy itself
            return h, w
        key = (t.data_ptr(), tuple(t.shape))
        if key not in self.copies:
            self.copies[key] = fp32_copy(t, seed=len(self.copies))
        return (self.copies[key], w) if self.fp32 == "hidden" else (h, self.copies[key])

    def grad_gib(self, n, hdim, v) -> float:
        extra = {"hidden": n, "weight": v}.get(self.fp32, 0) * hdim * 2 / GiB
        return super().grad_gib(n, hdim, v) + extra

    def fwd(self, h, w, y):
        h, w = self._operands(h, w)
        with self._configured():
            return self.op(h, w, y, temperature=self.temperature, logits_dtype=self.logits_dtype)

    def fb(self, h, w, y, a, b):
        h, w = self._operands(h, w)
        return super().fb(h, w, y, a, b)


BUILTIN = {"gemm": Gemm, "materialized": Materialized, "ours": Ours, "fp32_head": Fp32Head,
           "tf32_head": Tf32Head,
           "ours_var": lambda: Ours(name="ours_var", invariant=False, phases=("fwd",)),
           "ours_bf16_logits": lambda: OursMode("ours_bf16_logits", logits_dtype=torch.bfloat16),
           "ours_fp32_hidden": lambda: OursMode("ours_fp32_hidden", fp32="hidden"),
           "ours_fp32_weight": lambda: OursMode("ours_fp32_weight", fp32="weight")}
