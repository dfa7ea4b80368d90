"""Built-in processors on the real GPTModel (gloo, TP 1 and 2, SP on/off, tied/untied)."""

from __future__ import annotations

import pytest
import torch

from ..support import gpt_cpu
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
    expected = sorted(cfg.name for cfg in gpt_cpu.configs(len(fused_runs)))
    assert len(expected) >= 3
    for rank in fused_runs:
        assert _configs(rank) == expected


def test_mup_output_scaling_is_honoured(fused_runs):
    """On a MuP config (0.17+) the logits are scaled; fused must still equal the default."""
    mup = [name for name in _configs(fused_runs[0]) if name.endswith("-mup")]
    if not mup:
        pytest.skip("this core has no MuP (use_mup arrived in 0.17)")
    for rank in fused_runs:
        assert rank[f"{mup[0]}/logit_scale"] not in (None, 1.0)


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


def test_packed_thd_hidden_states_work_as_given(fused_runs):
    """[t, 1, h] hidden (an SP shard of it at TP=2), labels [1, t]: values and d_hidden."""
    for rank in fused_runs:
        packed = [k for k in rank if k.endswith("/packed")]
        assert packed
        for key in packed:
            (lp, ent, dh), (rlp, rent, rdh) = rank[key]["fused"], rank[key]["reference"]
            assert lp.shape == rlp.shape == (1, rlp.shape[1])
            assert (lp - rlp).abs().max() <= TOL and (ent - rent).abs().max() <= TOL
            assert (dh - rdh).abs().max() <= TOL * max(1.0, rdh.abs().max().item()), key


def test_fused_ce_loss_matches_the_default_loss(fused_runs):
    for rank in fused_runs:
        for name in _configs(rank):
            default, fused = rank[f"{name}/ce"]
            assert (default - fused).abs().max() <= TOL, name


def test_logits_processor_is_the_default_path(fused_runs):
    for rank in fused_runs:
        for name in _configs(rank):
            if "-mtp" in name:  # pre-0.17 MTP needs labels: no logits-only forward
                continue
            default, named = rank[f"{name}/logits"]
            assert torch.equal(default, named), name


ERRORS = {
    "no_labels": ("ValueError", "needs labels"),
    "zero_temperature": ("ValueError", "temperature must be finite and > 0"),
    "nan_temperature": ("ValueError", "temperature must be finite and > 0"),
    "str_temperature": ("TypeError", "temperature must be a float"),
    "label_too_big": ("ValueError", "labels out of range"),
    "label_negative": ("ValueError", "labels out of range"),
    "label_one_bad": ("ValueError", "first at [batch 1, position 2])"),
    "label_shape": ("ValueError", "labels must be [batch, seq]"),
    "label_dtype": ("TypeError", "labels must be an int64 (or int32) tensor of token ids, "
                                 "got torch.float32; pass e.g. labels.long()"),
    "unknown_name": ("ValueError", "known: fused_ce_loss, fused_logprob, fused_logprobs_at, "
                              "fused_topk_logprobs, logits"),
    "misspelled_context_key": ("ValueError", "'temprature' (did you mean 'temperature'?)"),
    "bad_logits_dtype": ("TypeError", "logits_dtype must be None or torch.float32"),
}


# On a MuP model (0.17+; logits x 1/4 there), whose scale the processors fold into T
MUP_ERRORS = {
    "mup_folds_out_of_range": ("ValueError", "temperature 7.378697629483821e+19 divided by the "
                                             "model's MuP output scale 0.25 leaves the fused "
                                             "ops' range: temperature must be <= 2^66"),
    "mup_tensor_folds_out_of_range": ("ValueError", "the temperature tensor divided by the "
                                                    "model's MuP output scale 0.25 leaves the "
                                                    "fused ops' range: temperature must be at "
                                                    "most 2^66"),
}


@pytest.mark.parametrize("case", sorted(ERRORS) + sorted(MUP_ERRORS))
def test_bad_input_raises_a_clear_error(fused_runs, case):
    kind, text = {**ERRORS, **MUP_ERRORS}[case]
    if case in MUP_ERRORS and case not in fused_runs[0]["errors"]:
        pytest.skip("this core has no MuP (use_mup arrived in 0.17)")
    for rank in fused_runs:
        got_kind, message = rank["errors"][case]
        assert got_kind == kind, message
        assert text in message


def test_builtins_are_plain_callables_on_an_upstream_native_core(fused_runs, trees,
                                                                 tmp_path_factory):
    """On 0.18+ without the overlay's name lookup, passing the functions gives the same."""
    from megatron_overlay import patching

    if patching.status(trees["upstream"]).state != patching.NATIVE:
        pytest.skip("an upstream pre-0.18 core has no hook at all")
    tp = len(fused_runs)
    upstream = run_worker(trees["upstream"], tp, "callable",
                          tmp_path_factory.mktemp(f"callable-tp{tp}"), script="fused_worker.py")
    for named, plain in zip(fused_runs, upstream):
        assert _configs(plain) and set(_configs(plain)) < set(_configs(named))
        for name in _configs(plain):
            assert torch.equal(named[f"{name}/fused"]["log_probs"],
                               plain[f"{name}/fused"]["log_probs"])
            assert torch.equal(named[f"{name}/fused"]["entropy"],
                               plain[f"{name}/fused"]["entropy"])


# ---------------------------------------------------------------- the hook's contract

def test_the_declared_keywords_are_0_18s():
    """hook.PROCESSOR_KWARGS is what 0.18.0 passes (test_hook_contract.py checks that the
    patched and native cores pass exactly processors_018's copy of them, in order)."""
    from megatron_overlay.hook import PROCESSOR_KWARGS

    from ..support.processors_018 import HOOK_KWARGS_018

    assert PROCESSOR_KWARGS == HOOK_KWARGS_018


class _OutputLayer(torch.nn.Module):
    """ColumnParallelLinear's call, at TP 1, on one gloo rank."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(vocab, hidden, dtype=torch.float32))
        self.tp_group = torch.distributed.group.WORLD
        self.sequence_parallel = False

    def forward(self, hidden, weight=None, runtime_gather_output=None):
        return hidden @ (self.weight if weight is None else weight).t(), None


@pytest.fixture()
def one_rank(tmp_path):
    """A one-rank gloo group, as the processors read the output layer's TP group."""
    dist = torch.distributed
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1),
                                rank=0, world_size=1)
    yield
    if started:
        dist.destroy_process_group()


def _hook_kwargs(name: str) -> dict:
    """What the hook passes, for a [b=2, s=3] batch over a vocab of 11."""
    from megatron_overlay.hook import PROCESSOR_KWARGS

    gen = torch.Generator().manual_seed(0)
    batch, seq, hidden, vocab = 2, 3, 5, 11
    labels = torch.randint(0, vocab, (batch, seq), generator=gen)
    contexts = {"fused_logprob": {"temperature": 0.7}, "fused_topk_logprobs": {"k": 3},
                "fused_logprobs_at": {"token_ids": torch.randint(0, vocab, (batch, seq, 2),
                                                                 generator=gen)}}
    kwargs = dict.fromkeys(PROCESSOR_KWARGS)
    kwargs.update(
        hidden_states=torch.randn(seq, batch, hidden, dtype=torch.float32, generator=gen),
        output_layer=_OutputLayer(vocab, hidden), labels=labels,
        loss_mask=torch.ones(batch, seq), context=contexts.get(name),
        compute_language_model_loss=lambda labels, logits: torch.nn.functional.cross_entropy(
            logits.permute(1, 2, 0), labels, reduction="none"),  # [s, b, v] -> [b, s]
        scale_logits=lambda logits: logits, runtime_gather_output=False)
    return kwargs


def _tensors(result) -> dict:
    return dict(result.items()) if hasattr(result, "items") else {"": result}


def test_every_builtin_takes_a_keyword_a_later_release_adds(one_rank):
    """A 17th keyword from a future megatron changes nothing: each built-in, by name."""
    from megatron_overlay import processors

    for name in processors.BUILTINS:
        torch.manual_seed(0)
        kwargs = _hook_kwargs(name)
        plain = _tensors(processors.resolve(name)(**kwargs))
        extended = _tensors(processors.resolve(name)(**kwargs, added_in_a_later_release=1))
        assert plain.keys() == extended.keys(), name
        for key, value in plain.items():
            assert (value is None and extended[key] is None) or torch.equal(
                value, extended[key]), (name, key)


def _worst_relative(grads: dict, ref: dict, only=None) -> float:
    assert grads.keys() == ref.keys() and ref
    return max(((grads[k] - g).abs().max() / g.abs().max().clamp(min=1e-30)).item()
               for k, g in ref.items() if only is None or only(k))


@pytest.mark.parametrize("model_class", ["gpt", "hybrid"])
def test_logits_dtype_bfloat16_reproduces_a_bf16_head(fused_runs, model_class):
    # context {"logits_dtype": "bfloat16"} against the logits path with every logit rounded
    # to bf16 (SP on at TP 2, untied); the rounding moves log-probs ~1000x more than the
    # difference between the two
    for rank in fused_runs:
        run = rank[f"precision/{model_class}/round"]
        fused, ref, fp32 = run["fused"], run["reference"], run["fp32"]
        bf16_head_err = (ref["log_probs"] - fp32["log_probs"]).abs().mean().item()
        assert (fused["log_probs"] - ref["log_probs"]).abs().mean().item() <= bf16_head_err / 100
        assert (fused["entropy"] - ref["entropy"]).abs().max() <= TOL
        assert _worst_relative(fused["grads"], ref["grads"]) <= TOL


def test_an_fp32_output_weight_is_an_fp32_head(fused_runs):
    # a bf16 model whose output layer weight is fp32: the fused path takes the mixed
    # operands as they are (no copy) and matches the logits path on upcast hidden states
    for rank in fused_runs:
        run = rank["precision/fp32_head"]
        fused, ref = run["fused"], run["reference"]
        assert run["weight_dtype"] == torch.float32
        assert (fused["log_probs"] - ref["log_probs"]).abs().max() <= TOL
        assert (fused["entropy"] - ref["entropy"]).abs().max() <= TOL
        assert _worst_relative(fused["grads"], ref["grads"],
                               lambda name: name.startswith("output_layer")) <= TOL
        # the layers below run in bf16: their gradients agree to bf16 rounding
        assert _worst_relative(fused["grads"], ref["grads"]) <= 5e-2
