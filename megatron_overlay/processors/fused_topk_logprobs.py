"""``"fused_topk_logprobs"``: each token's top-k log-probs at the output layer, no logits.

    out = model(input_ids, position_ids, attention_mask,
                output_processor="fused_topk_logprobs",
                output_processor_context={"k": 8, "temperature": 0.7})
    out.topk_ids         # [b, s, k] int64 global vocab ids, descending, ties to the lower id
    out.topk_log_probs   # [b, s, k] fp32 log softmax(logits / T) at them, differentiable

With ``labels`` also ``log_probs`` and ``entropy`` [b, s] as ``"fused_logprob"`` gives them
(one pass over the vocab for all of it; the entropy also without labels where the context
sets ``return_entropy=True``). E.g. a teacher's top-k for forward-KL
distillation, or the student's own top-k for reverse KL over it. A plain callable with
megatron-core 0.18's hook signature: pass the function itself on an upstream 0.18+ core.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..ops import forward_only
from ..ops.linear_topk import LinearTopkLogprobs, validate_k
from ..ops.params import DEFAULT_IGNORE_INDEX, LogprobParams
from ..ops.validation import validate_inputs, validate_matrices
from .context import REQUIRED, read_context
from .fused_logprob import FieldAccess, flatten_inputs

# the output_processor_context keys this processor accepts, with their defaults
# (return_entropy None: with labels, as log_probs)
FUSED_TOPK_KEYS = {"k": REQUIRED, "temperature": 1.0, "return_entropy": None,
                   "ignore_index": DEFAULT_IGNORE_INDEX, "strict_labels": None,
                   "logits_dtype": None}


@dataclass
class FusedTopkOutput(FieldAccess):
    """[b, s, k] top-k per token; [b, s] log-probs at the labels and entropy when labels
    were given. Attribute and item access."""

    topk_ids: torch.Tensor
    topk_log_probs: torch.Tensor
    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None  # the [s, b, h] hidden states the hook received


def fused_topk_logprobs(
    *, hidden_states, output_layer, output_weight, labels, context, scale_logits, **_unused,
) -> FusedTopkOutput:
    """Top-``k`` ids and log-probs of softmax(logits / temperature), fused.

    context: ``k`` (int, required, 1 <= k <= 256 and <= vocab), ``temperature`` (default
    1.0; float, or [b] / [b, s] tensor), ``return_entropy`` (default None: with labels;
    True: also without them, False: never),
    ``ignore_index`` (default -100), ``strict_labels`` (default None: ops/label_check.py),
    ``logits_dtype`` (default None, as fused_logprob's); a mapping with any other key is
    refused (see :mod:`.context`).
    """
    options = read_context(context, FUSED_TOPK_KEYS, "fused_topk_logprobs")
    k = options.pop("k")
    if options["return_entropy"] is None:
        options["return_entropy"] = labels is not None
    params = LogprobParams(**options)
    flat = flatten_inputs(hidden_states, output_layer, output_weight, scale_logits,
                          params.temperature)
    params = replace(params, temperature=flat.temperature,
                     token_batch=flat.batch)  # errors name [b, s] places
    flat_labels = None
    if labels is not None:
        flat_labels = flat.label_rows(labels)
        validate_inputs(flat.hidden, flat.weight, flat_labels, params,
                        vocab_size=flat.vocab_size)
    else:
        validate_matrices(flat.hidden, flat.weight)
    k = validate_k(k, flat.vocab_size)
    ids, topk_log_probs, log_probs, entropy = forward_only.call(
        LinearTopkLogprobs, flat.hidden, flat.weight, flat_labels, k, params, flat.tp_group)
    return FusedTopkOutput(topk_ids=flat.as_bs(ids), topk_log_probs=flat.as_bs(topk_log_probs),
                           log_probs=flat.as_bs(log_probs), entropy=flat.as_bs(entropy),
                           hidden_states=hidden_states)
