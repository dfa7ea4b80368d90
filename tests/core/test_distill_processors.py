"""Distillation processors and per-token temperature on the real GPTModel (gloo, TP 1 and 2,
SP on/off, tied/untied, MTP, MuP, packed THD) against the materialized logits."""

from __future__ import annotations

import pytest
import torch

from ..support import gpt_cpu
from .conftest import run_worker

TOL = 1e-5
KINDS = ("topk", "at", "logprob")


@pytest.fixture(scope="module", params=[1, 2], ids=["tp1", "tp2"])
def runs(request, tmp_path_factory):
    tp = request.param
    return run_worker(None, tp, None, tmp_path_factory.mktemp(f"distill-tp{tp}"),
                      script="distill_worker.py")


def _configs(rank: dict) -> list[str]:
    return sorted({k.split("/")[0] for k in rank if k.endswith("/topk/fused")})


def test_every_configuration_ran(runs):
    expected = sorted(cfg.name for cfg in gpt_cpu.configs(len(runs)))
    for rank in runs:
        assert _configs(rank) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_values_match_log_softmax_of_the_logits(runs, kind):
    for rank in runs:
        for name in _configs(rank):
            fused, ref = rank[f"{name}/{kind}/fused"], rank[f"{name}/{kind}/reference"]
            for field, value in fused.items():
                if field == "grads":
                    continue
                assert value.shape == ref[field].shape, (name, field)
                if field == "topk_ids":
                    assert value.dtype == torch.int64
                    assert torch.equal(value, ref[field]), name
                else:
                    assert value.dtype == torch.float32
                    assert (value - ref[field]).abs().max() <= TOL, (name, field)


@pytest.mark.parametrize("kind", KINDS)
def test_every_parameter_gradient_matches(runs, kind):
    for rank in runs:
        for name in _configs(rank):
            fused = rank[f"{name}/{kind}/fused"]["grads"]
            ref = rank[f"{name}/{kind}/reference"]["grads"]
            assert fused.keys() == ref.keys() and len(ref) > 10
            for param, grad in ref.items():
                scale = max(1.0, grad.abs().max().item())
                diff = (fused[param] - grad).abs().max().item()
                assert diff <= TOL * scale, f"{name} {kind} {param}: {diff}"


def test_topk_shapes_and_order(runs):
    for rank in runs:
        for name in _configs(rank):
            out = rank[f"{name}/topk/fused"]
            b, s = out["log_probs"].shape
            assert out["topk_ids"].shape == out["topk_log_probs"].shape == (b, s, 5)
            assert (out["topk_log_probs"][..., :-1] >= out["topk_log_probs"][..., 1:]).all()


def test_fused_ce_loss_takes_a_per_sample_temperature(runs):
    for rank in runs:
        for name in _configs(rank):
            fused, ref = rank[f"{name}/ce"]
            assert (fused - ref).abs().max() <= TOL, name


def test_packed_thd_input(runs):
    """[t, 1, h] hidden (an SP shard at TP=2), labels [1, t], token_ids [1, t, k],
    temperature [1, t]: ids, values and d_hidden."""
    for rank in runs:
        packed = [k for k in rank if k.endswith("/packed")]
        assert packed
        for key in packed:
            for kind in ("topk", "at"):
                ids, values, dh = rank[key][f"{kind}/fused"]
                rids, rvalues, rdh = rank[key][f"{kind}/reference"]
                assert torch.equal(ids, rids) and values.shape == rvalues.shape
                assert (values - rvalues).abs().max() <= TOL, (key, kind)
                assert (dh - rdh).abs().max() <= TOL * max(1.0, rdh.abs().max().item())


def test_topk_ties_across_vocab_shards_go_to_the_lower_id(runs):
    for rank in runs:
        ties = rank["ties"]
        tp = ties["tp"]
        expected = sorted((5, 9, 16 * tp - 3, 16 * (tp - 1) + 2))[:3]
        assert ties["ids"].tolist() == [expected] * 3
        assert torch.equal(ties["log_probs"][:, 0], ties["log_probs"][:, 2])


ERRORS = {
    "k_missing": ("ValueError", "fused_topk_logprobs needs output_processor_context key(s) "
                                "'k'"),
    "k_zero": ("ValueError", "k must satisfy 1 <= k <= 256"),
    "k_too_big": ("ValueError", "k must satisfy 1 <= k <= 256"),
    "k_above_vocab": ("ValueError", "k <= vocab size (128)"),
    "k_float": ("TypeError", "k must be an int"),
    "topk_unknown_key": ("ValueError", "fused_topk_logprobs: unknown output_processor_context "
                                       "key(s) 'temprature' (did you mean 'temperature'?)"),
    "ids_missing": ("ValueError", "fused_logprobs_at needs output_processor_context key(s) "
                                  "'token_ids'"),
    "ids_too_big": ("ValueError", "token_ids out of range: ids must lie in [0, 128)"),
    "ids_negative": ("ValueError", "token_ids out of range"),
    "ids_one_bad": ("ValueError", "first at [batch 1, position 2])"),
    "topk_label_one_bad": ("ValueError", "first at [batch 0, position 5])"),
    "ids_shape": ("ValueError", "token_ids must be [batch, seq, k]"),
    "ids_dtype": ("TypeError", "token_ids must be an int64 tensor"),
    "at_unknown_key": ("ValueError", "fused_logprobs_at: unknown output_processor_context "
                                     "key(s) 'k'"),
    "temperature_shape": ("ValueError", "a [batch, seq] = [2, 32] tensor (per token)"),
    "temperature_zero_entry": ("ValueError", "temperature must be finite and > 0 everywhere, "
                                             "got 0.0 at flat index 3"),
    "temperature_nan_entry": ("ValueError", "temperature must be finite and > 0 everywhere"),
    "temperature_int_tensor": ("TypeError", "temperature must be a float or a floating-point"),
    "logprob_temperature_shape": ("ValueError", "a [batch] = [2] tensor (per sample)"),
    "labels_list": ("TypeError", "labels must be a [batch, seq] tensor of token ids, got list"),
    "logprob_labels_list": ("TypeError", "labels must be a [batch, seq] tensor"),
    "context_array": ("TypeError", "fused_logprob: output_processor_context must be None, a "
                                   "mapping"),
    "temperature_requires_grad": ("ValueError", "temperature requires grad"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_bad_input_raises_a_clear_error(runs, case):
    kind, text = ERRORS[case]
    for rank in runs:
        got_kind, message = rank["errors"][case]
        assert got_kind == kind, message
        assert text in message, message


def test_topk_entropy_without_labels_where_asked(runs):
    """``return_entropy=True`` gives the top-k processor's entropy without labels (it was
    dropped without a word); by default it comes with labels only."""
    for rank in runs:
        got = rank["entropy_without_labels"]
        assert got["default"] is None
        assert got["asked"] is not None and got["asked"].shape == got["reference"].shape
        assert torch.allclose(got["asked"], got["reference"], rtol=0, atol=TOL)
