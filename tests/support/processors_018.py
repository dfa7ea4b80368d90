"""Processors written against megatron-core 0.18's hook, used unchanged on every core."""

from __future__ import annotations

# The 16 keyword arguments of 0.18.0's _postprocess hook call, in order.
HOOK_KWARGS_018 = (
    "hidden_states", "output_layer", "output_weight", "labels", "loss_mask", "input_ids",
    "position_ids", "attention_mask", "decoder_input", "inference_context",
    "packed_seq_params", "runtime_gather_output", "context", "compute_language_model_loss",
    "scale_logits", "config",
)


def redo_default_postprocess(
    *, hidden_states, output_layer, output_weight, labels, loss_mask, input_ids,
    position_ids, attention_mask, decoder_input, inference_context, packed_seq_params,
    runtime_gather_output, context, compute_language_model_loss, scale_logits, config,
):
    """0.18's default postprocess (training path), written as a processor would be."""
    logits, _ = output_layer(hidden_states, weight=output_weight,
                             runtime_gather_output=runtime_gather_output)
    logits = scale_logits(logits)
    if labels is None:
        return logits.transpose(0, 1).contiguous()  # [s b h] => [b s h]
    return compute_language_model_loss(labels, logits)


def recording_processor(**kwargs):
    """Record what the hook passed (names in order, identities), then redo the default."""
    context = kwargs["context"]
    loss_mask = kwargs["loss_mask"]
    context["calls"].append({
        "names": list(kwargs),
        "context_is_callers": True,  # it is `context` itself we appended to
        "loss_mask_is_callers": lambda caller_mask: loss_mask is caller_mask,
        "labels": kwargs["labels"],
        "output_weight_is_none": kwargs["output_weight"] is None,
    })
    return redo_default_postprocess(**kwargs)
