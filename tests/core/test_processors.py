"""Built-in processors on the real GPTModel (gloo, TP 1 and 2, SP on/off, tied/untied)."""

from __future__ import annotations

import pytest
import torch

from .conftest import run_worker

TOL = 1e-5


@pytest.fixture(scope="module", params=[1, 2], ids=["tp1", "tp2"])
def fused_runs(request, tmp_path_factory):
    tp = request.param
    return run_worker(None, tp, None, tmp_path_factory.mktemp(f"fused-tp{tp}"),
                      script="fused_worker.py")


def _configs(rank: dict) -> list[str]:
    return sorted(k[:-len("/fused")] for k in rank if k.endswith("/fused"))


def test_every_configuration_ran(fused_runs):
    tp = len(fused_runs)
    expected = 2 if tp == 1 else 4  # tied/untied (x SP off/on at TP=2)
    for rank in fused_runs:
        assert len(_configs(rank)) == expected


def test_fused_logprob_matches_log_softmax_of_the_logits(fused_runs):
    """log-probs and entropy at T=0.7 within 1e-5 of the materialized-logits reference."""
    for rank in fused_runs:
        for name in _configs(rank):
            fused, ref = rank[f"{name}/fused"], rank[f"{name}/reference"]
            assert fused["log_probs"].dtype == torch.float32
            assert fused["log_probs"].shape == ref["log_probs"].shape
            assert (fused["log_probs"] - ref["log_probs"]).abs().max() <= TOL, name
            assert (fused["entropy"] - ref["entropy"]).abs().max() <= TOL, name


def test_every_parameter_gradient_matches(fused_runs):
    for rank in fused_runs:
        for name in _configs(rank):
            fused, ref = rank[f"{name}/fused"]["grads"], rank[f"{name}/reference"]["grads"]
            assert fused.keys() == ref.keys() and len(ref) > 10
            for param, grad in ref.items():
                scale = max(1.0, grad.abs().max().item())
                diff = (fused[param] - grad).abs().max().item()
                assert diff <= TOL * scale, f"{name} {param}: {diff}"


def test_fused_ce_loss_matches_the_default_loss(fused_runs):
    for rank in fused_runs:
        for name in _configs(rank):
            default, fused = rank[f"{name}/ce"]
            assert (default - fused).abs().max() <= TOL, name


def test_logits_processor_is_the_default_path(fused_runs):
    for rank in fused_runs:
        for name in _configs(rank):
            default, named = rank[f"{name}/logits"]
            assert torch.equal(default, named), name


ERRORS = {
    "no_labels": ("ValueError", "needs labels"),
    "zero_temperature": ("ValueError", "temperature must be finite and > 0"),
    "nan_temperature": ("ValueError", "temperature must be finite and > 0"),
    "str_temperature": ("TypeError", "temperature must be a float"),
    "label_too_big": ("ValueError", "labels out of range"),
    "label_negative": ("ValueError", "labels out of range"),
    "label_shape": ("ValueError", "labels must be [batch, seq]"),
    "label_dtype": ("TypeError", "labels must be an int64 tensor"),
    "unknown_name": ("ValueError", "known: fused_ce_loss, fused_logprob, logits"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_bad_input_raises_a_clear_error(fused_runs, case):
    kind, text = ERRORS[case]
    for rank in fused_runs:
        got_kind, message = rank["errors"][case]
        assert got_kind == kind, message
        assert text in message
