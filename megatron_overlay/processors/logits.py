"""``"logits"``: today's default postprocess, as an explicit processor.

Materializes the logits exactly as megatron-core 0.18's ``_postprocess`` does outside
inference: the output layer, MuP scaling, then logits [b, s, v] without labels or the
per-token loss [b, s] with them.
"""

from __future__ import annotations


def logits(
    *, hidden_states, output_layer, output_weight, labels, runtime_gather_output,
    compute_language_model_loss, scale_logits, **_unused,
):
    output, _ = output_layer(hidden_states, weight=output_weight,
                             runtime_gather_output=runtime_gather_output)
    output = scale_logits(output)
    if labels is None:
        return output.transpose(0, 1).contiguous()  # [s b v] => [b s v]
    return compute_language_model_loss(labels, output)
