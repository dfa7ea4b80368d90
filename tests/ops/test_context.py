"""The shared output_processor_context reader: mappings are strict, objects are not."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from megatron_overlay.processors.context import REQUIRED, read_context

ACCEPTED = {"temperature": 1.0, "return_entropy": True, "ignore_index": -100}


def test_none_gives_every_default():
    assert read_context(None, ACCEPTED, "fused_logprob") == ACCEPTED


def test_a_mapping_sets_some_keys_and_the_rest_default():
    got = read_context({"temperature": 0.7}, ACCEPTED, "fused_logprob")
    assert got == {"temperature": 0.7, "return_entropy": True, "ignore_index": -100}


def test_a_misspelled_mapping_key_is_refused_with_a_did_you_mean():
    with pytest.raises(ValueError) as err:
        read_context({"temprature": 0.7}, ACCEPTED, "fused_logprob")
    message = str(err.value)
    assert message.startswith("fused_logprob: unknown output_processor_context key(s)")
    assert "'temprature' (did you mean 'temperature'?)" in message
    for key, default in ACCEPTED.items():
        assert f"{key} (default {default!r})" in message


def test_every_unknown_key_is_named_even_without_a_close_match():
    with pytest.raises(ValueError) as err:
        read_context({"temperature": 0.7, "returnentropy": False, 3: "x"}, ACCEPTED, "p")
    message = str(err.value)
    assert "'returnentropy' (did you mean 'return_entropy'?)" in message
    assert "(did you mean 'return_entropy'?), 3; accepted keys" in message
    assert "'temperature'" not in message.split(";")[0]  # an accepted key is not reported


@dataclass
class VerlLikeConfig:
    """A framework's own options object: carries far more than the processor reads."""

    temperature: float = 0.5
    micro_batch_size: int = 8
    use_remove_padding: bool = True


def test_an_object_may_carry_other_attributes():
    got = read_context(VerlLikeConfig(), ACCEPTED, "fused_logprob")
    assert got == {"temperature": 0.5, "return_entropy": True, "ignore_index": -100}


def test_values_are_passed_through_for_the_processor_to_validate():
    assert read_context({"temperature": "hot"}, ACCEPTED, "p")["temperature"] == "hot"


def test_a_required_key_must_be_given():
    accepted = {"k": REQUIRED, "temperature": 1.0}
    assert read_context({"k": 4}, accepted, "topk")["k"] == 4
    assert read_context(type("C", (), {"k": 2})(), accepted, "topk")["k"] == 2
    for context in (None, {"temperature": 0.7}, VerlLikeConfig()):
        with pytest.raises(ValueError, match=r"topk needs output_processor_context key\(s\) 'k'"):
            read_context(context, accepted, "topk")


def test_the_builtin_processors_use_it_before_any_work():
    """Both fused built-ins refuse a misspelled key before touching their tensor arguments."""
    from megatron_overlay.hook import PROCESSOR_KWARGS
    from megatron_overlay.processors.fused_logprob import fused_ce_loss, fused_logprob

    kwargs = {name: None for name in PROCESSOR_KWARGS if name != "context"}
    with pytest.raises(ValueError, match="did you mean 'temperature'"):
        fused_logprob(context={"temprature": 0.7}, **kwargs)
    # fused_ce_loss computes no entropy, so return_entropy is not one of its keys
    with pytest.raises(ValueError, match=r"fused_ce_loss: .*'return_entropy'"):
        fused_ce_loss(context={"return_entropy": False}, **kwargs)


@pytest.mark.parametrize("context", [0.7, 1, "temperature", [("temperature", 0.7)],
                                     ("temperature", 0.7), {"temperature"}, b"x"])
def test_a_value_is_not_a_context(context):
    """output_processor_context=0.7 (or a list of pairs): not options; read as an object it
    would have no attribute and run at T = 1."""
    with pytest.raises(TypeError, match="output_processor_context must be None, a mapping"):
        read_context(context, ACCEPTED, "fused_logprob")


def test_a_tensor_is_not_a_context():
    import torch
    with pytest.raises(TypeError, match="got Tensor"):
        read_context(torch.full((4,), 0.7), ACCEPTED, "fused_logprob")


def test_an_array_or_an_iterator_is_not_a_context():
    """np.array(0.7) is no Number and no Sequence, a generator neither: read as objects
    they ran at every default (T = 1)."""
    np = pytest.importorskip("numpy")
    for context in (np.array(0.7), np.array([0.7]), iter([0.7]), (t for t in [0.7])):
        with pytest.raises(TypeError, match="output_processor_context must be None, a mapping"):
            read_context(context, ACCEPTED, "fused_logprob")


def test_a_named_tuple_is_an_object_with_attributes():
    from typing import NamedTuple

    class Options(NamedTuple):
        temperature: float
        batch: int

    got = read_context(Options(0.6, 4), ACCEPTED, "fused_logprob")
    assert got == {"temperature": 0.6, "return_entropy": True, "ignore_index": -100}
