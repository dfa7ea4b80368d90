"""Both stage implementations satisfy ops/stages.py's Protocols, signature by signature.

For every method of a Protocol the implementation has a function whose positional
parameters are the Protocol's, in order, with the same names, kinds and defaults; the
Protocol's keyword-only parameters are keyword-only there too, with the same defaults;
anything else it takes (tools' and tests' extras) is keyword-only with a default, so a
call written against the Protocol is a valid call of every implementation. The Triton
implementation needs Triton to import (not a GPU); without Triton it is skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from types import SimpleNamespace

import pytest
import torch

from megatron_overlay.ops import stages, torch_chunked, torch_topk

IMPLEMENTATIONS = [
    ("megatron_overlay.ops.torch_chunked", stages.LogprobStages),
    ("megatron_overlay.ops.torch_topk", stages.TopkStage),
    ("megatron_overlay.ops.kernels.triton_impl", stages.LogprobStages),
    ("megatron_overlay.ops.kernels.triton_topk", stages.TopkStage),
]


def protocol_methods(protocol) -> dict[str, inspect.Signature]:
    """The Protocol's methods and their signatures, without ``self``."""
    methods = {}
    for name, member in vars(protocol).items():
        if inspect.isfunction(member) and not name.startswith("_"):
            sig = inspect.signature(member)
            methods[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return methods


def mismatches(impl, protocol) -> list[str]:
    """How ``impl``'s functions depart from ``protocol``'s methods (empty: none)."""
    found = []
    for name, want in protocol_methods(protocol).items():
        fn = getattr(impl, name, None)
        if not callable(fn):
            found.append(f"{name}: missing")
            continue
        got = inspect.signature(fn).parameters
        kw_only = inspect.Parameter.KEYWORD_ONLY
        want_pos = [p for p in want.parameters.values() if p.kind != kw_only]
        got_pos = [p for p in got.values() if p.kind != kw_only]
        for w, g in zip(want_pos, got_pos):
            if (w.name, w.kind, w.default) != (g.name, g.kind, g.default):
                found.append(f"{name}: positional {g} where the contract has {w}")
        if len(got_pos) != len(want_pos):
            found.append(f"{name}: {len(got_pos)} positional parameters, the contract "
                         f"{len(want_pos)}")
        for w in want.parameters.values():
            if w.kind == kw_only and (w.name not in got or got[w.name].kind != kw_only
                                      or got[w.name].default != w.default):
                found.append(f"{name}: keyword-only {w} missing or different "
                             f"({got.get(w.name)})")
        for g in got.values():
            if g.name not in want.parameters and (g.kind != kw_only or g.default is g.empty):
                found.append(f"{name}: extra parameter {g} is not keyword-only with a default")
    return found


@pytest.mark.parametrize("module, protocol", IMPLEMENTATIONS,
                         ids=[m.rsplit(".", 1)[1] for m, _ in IMPLEMENTATIONS])
def test_implementation_matches_its_protocol(module, protocol):
    if ".kernels." in module:
        pytest.importorskip("triton", reason="Triton is not installed: the Triton stages "
                                             "cannot be imported; the torch ones are checked")
    impl = importlib.import_module(module)
    assert protocol_methods(protocol), "no methods found on the Protocol"
    assert mismatches(impl, protocol) == []


def test_the_check_sees_a_departure():
    def forward_stats(hidden, weight, labels, inv_temperature, with_entropy): ...

    def backward(hidden, weight, local_labels, inv_temperature, lse, mean_z, grad_logprob,
                 grad_entropy, chunk, *, d_weight_dtype=None, d_hidden_dtype=None,
                 sparse_ids=None):
        ...

    bad = SimpleNamespace(forward_stats=forward_stats, backward=backward)
    found = mismatches(bad, stages.LogprobStages)
    assert any("forward_stats: positional" in f and "labels" in f for f in found), found
    assert any("backward: 9 positional" in f for f in found), found
    assert any("sparse_grads" in f for f in found), found
    assert any(f == "logits_at: missing" for f in found), found


def test_cpu_picks_the_torch_stages(monkeypatch):
    monkeypatch.delenv(stages.IMPL_ENV, raising=False)
    cpu = torch.device("cpu")
    assert stages.pick_impl(cpu) is torch_chunked
    assert stages.pick_topk_impl(cpu) == (torch_topk, torch_chunked)
    monkeypatch.setenv(stages.IMPL_ENV, "torch")
    assert stages.pick_impl(torch.device("cuda")) is torch_chunked


def test_the_pick_follows_the_setting_after_it_is_cached(monkeypatch):
    """The choice is kept per setting and device type (the import and checks once, not a
    call): a setting changed later is still taken, and a bad one refused at every call."""
    monkeypatch.delenv(stages.IMPL_ENV, raising=False)
    cpu = torch.device("cpu")
    assert stages.pick_impl(cpu) is torch_chunked
    assert stages._picked[("", "cpu")][0] is torch_chunked  # kept
    monkeypatch.setenv(stages.IMPL_ENV, " Torch ")
    assert stages.pick_impl(torch.device("cuda")) is torch_chunked
    monkeypatch.setenv(stages.IMPL_ENV, "torhc")
    for _ in range(2):
        with pytest.raises(ValueError, match="MEGATRON_OVERLAY_IMPL='torhc'"):
            stages.pick_impl(cpu)
    triton_ok = importlib.util.find_spec("triton") is not None
    monkeypatch.setenv(stages.IMPL_ENV, "triton")
    if triton_ok:
        from megatron_overlay.ops.kernels import triton_impl
        assert stages.pick_impl(cpu) is triton_impl
    else:
        with pytest.raises(RuntimeError, match="Triton is not importable"):
            stages.pick_impl(cpu)
    monkeypatch.delenv(stages.IMPL_ENV)
    assert stages.pick_impl(cpu) is torch_chunked


def test_triton_finalize_refuses_values_it_cannot_write_in_place():
    """The Triton finalize writes ``values`` in place in its kernel: a strided or non-fp32
    tensor is refused before any launch (the ops' values are contiguous fp32)."""
    triton_impl = pytest.importorskip("megatron_overlay.ops.kernels.triton_impl")
    stats = torch.zeros(1, 4, 4)
    for values in (torch.zeros(3, 4).t(), torch.zeros(4, 3, dtype=torch.float64)):
        with pytest.raises(ValueError, match="values must be a contiguous float32"):
            triton_impl.finalize(stats, None, 10, -100, True, values=values)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_backward_takes_finalizes_row_flags_together(impl):
    """``valid`` / ``bad`` are finalize's two flags: a backward given one alone refuses it
    (the kernel reads both), before any work."""
    if impl == "triton":
        stage = pytest.importorskip("megatron_overlay.ops.kernels.triton_impl").backward
    else:
        from megatron_overlay.ops import torch_chunked
        stage = torch_chunked.backward
    h, w = torch.randn(4, 8), torch.randn(16, 8)
    lse, g = torch.zeros(4), torch.ones(4)
    flag = torch.ones(4, dtype=torch.bool)
    for given, missing in (({"valid": flag}, "valid"), ({"bad": ~flag}, "bad")):
        with pytest.raises(ValueError, match=f"pass both or neither \\(got {missing} alone"):
            stage(h, w, torch.zeros(4, dtype=torch.int64), 1.0, lse, None, g, None, **given)
