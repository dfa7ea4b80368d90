"""``"fused_logprobs_at"``: log-probs at K given vocab ids per token, no logits.

    out = model(input_ids, position_ids, attention_mask,
                output_processor="fused_logprobs_at",
                output_processor_context={"token_ids": teacher_topk_ids})  # [b, s, k]
    out.log_probs   # [b, s, k] fp32 log softmax(logits / T) at token_ids, differentiable

E.g. the student's log-probs at a teacher's top-k ids, for forward-KL distillation. A
plain callable with megatron-core 0.18's hook signature: pass the function itself on an
upstream 0.18+ core.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..ops import forward_only
from ..ops.linear_logprobs_at import LinearLogprobsAt
from ..ops.params import LogprobParams
from ..ops.validation import validate_matrices, validate_token_ids
from .context import REQUIRED, read_context
from .fused_logprob import FieldAccess, flatten_inputs

# the output_processor_context keys this processor accepts, with their defaults
FUSED_LOGPROBS_AT_KEYS = {"token_ids": REQUIRED, "temperature": 1.0, "return_entropy": False,
                          "logits_dtype": None}


@dataclass
class FusedLogprobsAtOutput(FieldAccess):
    """[b, s, k] log-probs at the given ids; [b, s] entropy when asked for."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None  # the [s, b, h] hidden states the hook received


def _flat_token_ids(token_ids, batch: int, seq: int) -> torch.Tensor:
    """[b, s, k] -> [s * b, k] in the ops' s-major row order."""
    if not isinstance(token_ids, torch.Tensor):
        raise TypeError(f"token_ids must be an int64 tensor of vocab ids, got "
                        f"{type(token_ids).__name__}")
    if token_ids.dim() != 3 or token_ids.shape[:2] != (batch, seq) or token_ids.shape[2] < 1:
        raise ValueError(f"token_ids must be [batch, seq, k] = [{batch}, {seq}, k >= 1] to "
                         f"match the hidden states, got {tuple(token_ids.shape)}")
    return token_ids.transpose(0, 1).reshape(seq * batch, token_ids.shape[2])


def fused_logprobs_at(
    *, hidden_states, output_layer, output_weight, context, scale_logits, **_unused,
) -> FusedLogprobsAtOutput:
    """Log-probs of softmax(logits / temperature) at ``token_ids``, fused; labels unused.

    context: ``token_ids`` ([b, s, k] int64, required), ``temperature`` (default 1.0;
    float, or [b] / [b, s] tensor), ``return_entropy`` (default False), ``logits_dtype``
    (default None, as fused_logprob's); a mapping with any other key is refused (see
    :mod:`.context`).
    """
    options = read_context(context, FUSED_LOGPROBS_AT_KEYS, "fused_logprobs_at")
    token_ids = options.pop("token_ids")
    params = LogprobParams(**options)
    flat = flatten_inputs(hidden_states, output_layer, output_weight, scale_logits,
                          params.temperature)
    token_ids = _flat_token_ids(token_ids, flat.batch, flat.seq)
    validate_matrices(flat.hidden, flat.weight)
    # errors name [b, s] places
    validate_token_ids(token_ids, flat.hidden.shape[0], flat.vocab_size, flat.hidden.device,
                       batch=flat.batch)
    params = replace(params, temperature=flat.temperature, token_batch=flat.batch)
    log_probs, entropy = forward_only.call(LinearLogprobsAt, flat.hidden, flat.weight,
                                           token_ids, params, flat.tp_group)
    return FusedLogprobsAtOutput(log_probs=flat.as_bs(log_probs), entropy=flat.as_bs(entropy),
                                 hidden_states=hidden_states)
