"""``"fused_logprob"``: per-token log-probs and entropy at the output layer, no logits.

    out = model(input_ids, position_ids, attention_mask, labels=labels,
                output_processor="fused_logprob",
                output_processor_context={"temperature": 0.7})
    out.log_probs   # [b, s] fp32: log softmax(logits / T)[label]
    out.entropy     # [b, s] fp32: entropy of softmax(logits / T)

Also ``"fused_ce_loss"`` (per-token cross-entropy for SFT, through the same op). Both are
plain callables with megatron-core 0.18's hook signature, so they also work on an
upstream 0.18+ core without the overlay (pass the function instead of its name).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

import torch

from ..ops import forward_only
from ..ops.linear_logprob import LinearLogprobEntropy
from ..ops.params import DEFAULT_IGNORE_INDEX, LogprobParams
from ..ops.temperature import (check_temperature_values, rows_from_batch_seq,
                               validate_temperature)
from ..ops.validation import validate_inputs
from .context import read_context

# the output_processor_context keys each processor accepts, with their defaults
FUSED_LOGPROB_KEYS = {"temperature": 1.0, "return_entropy": True,
                      "ignore_index": DEFAULT_IGNORE_INDEX, "strict_labels": None,
                      "logits_dtype": None}
FUSED_CE_LOSS_KEYS = {"temperature": 1.0, "ignore_index": DEFAULT_IGNORE_INDEX,
                      "strict_labels": None, "logits_dtype": None}


class FieldAccess:
    """Item access, ``keys``/``items`` and iteration over a dataclass's fields, so an output
    reads like the dict a processor could also have returned."""

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def keys(self):
        return [f.name for f in fields(self)]

    def items(self):
        return [(k, getattr(self, k)) for k in self.keys()]

    def __iter__(self):
        return iter(self.keys())


@dataclass
class FusedLogprobOutput(FieldAccess):
    """Per-token results, [b, s] like the logits path's loss; attribute and item access."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None  # the [s, b, h] hidden states the hook received


def _tp_group(output_layer):
    group = getattr(output_layer, "tp_group", None)
    if group is not None:
        return group
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_group()


def _logit_scale(scale_logits) -> float:
    """The factor ``scale_logits`` multiplies logits by (MuP's output multiplier, or 1).

    0.18 scales the materialized logits; the fused op folds the same factor into the
    temperature instead. Probed on a tiny CPU tensor (on the GPU, reading the factor back
    would be a host sync, and creating the probe would break CUDA-graph capture);
    anything but a plain multiplication is refused rather than silently ignored.
    """
    probe = torch.tensor([1.0, 2.0], dtype=torch.float32)
    scaled = scale_logits(probe)
    factor = float(scaled[0])
    if not torch.allclose(scaled, probe * factor):
        raise ValueError("scale_logits is not a plain multiplication; the fused processors "
                         "support MuP output scaling only")
    return factor


def _fold_logit_scale(temperature, factor: float):
    """T / factor: MuP's output multiplier folded into the temperature. The caller's value
    has been checked as given (LogprobParams); one that folds out of the ops' range gets an
    error that says so: a float, or a CPU tensor (on CUDA its rows come out NaN, as for any
    bad entry: ops/temperature.py)."""
    folded = temperature / factor
    try:
        if not isinstance(folded, torch.Tensor):
            validate_temperature(folded)
        elif folded.device.type == "cpu":
            check_temperature_values(folded)
    except ValueError as err:
        what = f"temperature {temperature!r}" if not isinstance(temperature, torch.Tensor) \
            else "the temperature tensor"
        raise ValueError(f"{what} divided by the model's MuP output scale {factor:g} "
                         f"leaves the fused ops' range: {err}") from None
    return folded


class FlatInputs(NamedTuple):
    """The hook's inputs as the ops take them: s-major token rows, this rank's vocab shard."""

    hidden: torch.Tensor  # [s * b, h], a view of the (SP-gathered) [s, b, h] hidden states
    weight: torch.Tensor  # [V_local, h]
    tp_group: Any         # None at TP = 1
    vocab_size: int       # global
    seq: int
    batch: int
    temperature: Any      # float, 0-d or [s * b] tensor; MuP's output scale folded in

    def as_bs(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """[s * b, ...] op output -> [b, s, ...]."""
        return None if t is None else t.view(self.seq, self.batch, *t.shape[1:]).transpose(0, 1)

    def label_rows(self, labels) -> torch.Tensor:
        """The model's [b, s] ``labels`` -> the ops' [s * b] rows (their dtype and range:
        ops/validation.py)."""
        if not isinstance(labels, torch.Tensor):
            raise TypeError(f"labels must be a [batch, seq] tensor of token ids, got "
                            f"{type(labels).__name__}; pass e.g. torch.as_tensor(labels)")
        if labels.shape != (self.batch, self.seq):
            raise ValueError(f"labels must be [batch, seq] = [{self.batch}, {self.seq}] to "
                             f"match the hidden states, got {tuple(labels.shape)}")
        return labels.transpose(0, 1).reshape(self.seq * self.batch)


def flatten_inputs(hidden_states, output_layer, output_weight, scale_logits,
                   temperature) -> FlatInputs:
    """[s, b, h] hidden (SP shard or full) and the output layer -> the ops' inputs.

    ``temperature``: float, 0-d, [b] or [b, s] tensor (ops/temperature.py).
    """
    from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

    weight = output_weight if output_weight is not None else output_layer.weight
    group = _tp_group(output_layer)
    tp = torch.distributed.get_world_size(group) if group is not None else 1
    if getattr(output_layer, "sequence_parallel", False) and tp > 1:
        # As ColumnParallelLinear gathers along s. The ops' d_hidden is already complete on
        # every rank, so the backward of this gather only splits it (no reduce-scatter).
        hidden_states = gather_from_sequence_parallel_region(
            hidden_states, tensor_parallel_output_grad=False, group=group)
    seq, batch = hidden_states.shape[:2]
    # dtypes: the ops' rules (one dtype, or 16-bit with fp32: an fp32 output weight is an
    # fp32 head, used as it is, never copied)
    temperature = rows_from_batch_seq(temperature, batch, seq)
    factor = _logit_scale(scale_logits)
    if factor != 1.0:
        temperature = _fold_logit_scale(temperature, factor)
    flat_hidden = hidden_states.reshape(seq * batch, hidden_states.shape[-1])  # s-major view
    return FlatInputs(flat_hidden, weight, group if tp > 1 else None, weight.shape[0] * tp,
                      seq, batch, temperature)


def _run_fused(hidden_states, output_layer, output_weight, labels, scale_logits,
               params: LogprobParams):
    """[s, b, h] hidden (SP shard or full) -> log-probs and entropy, [b, s] fp32."""
    flat = flatten_inputs(hidden_states, output_layer, output_weight, scale_logits,
                          params.temperature)
    flat_labels = flat.label_rows(labels)
    params = replace(params, temperature=flat.temperature,
                     token_batch=flat.batch)  # errors name [b, s] places
    validate_inputs(flat.hidden, flat.weight, flat_labels, params, vocab_size=flat.vocab_size)
    log_probs, entropy = forward_only.call(
        LinearLogprobEntropy, flat.hidden, flat.weight, flat_labels, params, flat.tp_group)
    return flat.as_bs(log_probs), flat.as_bs(entropy)


def _require_labels(labels, name: str, instead: str):
    if labels is None:
        raise ValueError(f"{name} needs labels: pass labels=<[batch, seq] next-token ids> to "
                         f"the model's forward, {instead}")


def fused_logprob(
    *, hidden_states, output_layer, output_weight, labels, context, scale_logits, **_unused,
) -> FusedLogprobOutput:
    """Log-probs of ``labels`` and entropy under softmax(logits / temperature), fused.

    context: None, a mapping or an object with ``temperature`` (default 1.0; a float, or a
    [b] / [b, s] tensor of per-sample / per-token temperatures), ``return_entropy``
    (default True), ``ignore_index`` (default -100), ``strict_labels`` (default None:
    see ops/label_check.py) and ``logits_dtype`` (default None: fp32 logits; "bfloat16"
    reproduces a bf16 head, see ops/params.py); a mapping with any other key is refused
    (see :mod:`.context`).
    """
    params = LogprobParams(**read_context(context, FUSED_LOGPROB_KEYS, "fused_logprob"))
    _require_labels(labels, "fused_logprob",
                    "or use output_processor='logits' (or none) to get the logits")
    log_probs, entropy = _run_fused(hidden_states, output_layer, output_weight, labels,
                                    scale_logits, params)
    return FusedLogprobOutput(log_probs=log_probs, entropy=entropy, hidden_states=hidden_states)


def fused_ce_loss(
    *, hidden_states, output_layer, output_weight, labels, loss_mask, context, scale_logits,
    **_unused,
) -> torch.Tensor:
    """Per-token cross-entropy [b, s] fp32 (times ``loss_mask`` when given), for SFT.

    The same as the default path's loss at temperature 1; context may set ``temperature``
    ``ignore_index`` and ``strict_labels``. Entropy is not computed.
    """
    params = LogprobParams(return_entropy=False,
                           **read_context(context, FUSED_CE_LOSS_KEYS, "fused_ce_loss"))
    _require_labels(labels, "fused_ce_loss", "or use output_processor='logits' for logits")
    log_probs, _ = _run_fused(hidden_states, output_layer, output_weight, labels,
                              scale_logits, params)
    loss = -log_probs
    if loss_mask is not None:
        if loss_mask.shape != loss.shape:
            raise ValueError(f"loss_mask must be [batch, seq] = {list(loss.shape)}, got "
                             f"{list(loss_mask.shape)}")
        loss = loss * loss_mask.to(loss.dtype)
    return loss
