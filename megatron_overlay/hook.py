"""The ``output_processor`` hook's contract, as megatron-core 0.18 defines it: declared here once.

A model's forward takes two keyword-only parameters, :data:`FORWARD_KWARGS`. Given a
processor, the forward calls it in place of its postprocess, with the keyword arguments
:data:`PROCESSOR_KWARGS` (0.18.0's ``_postprocess``, in the order it passes them; the
overlay's patch sets pass the same on every older core), and returns what it returns.

A processor should take the keywords it reads and ``**kwargs`` for the rest, so that a
keyword a later megatron release adds does not break it.

Imports nothing.
"""

from __future__ import annotations

from typing import Any, Protocol

# the model forward's keyword-only parameters that carry the hook
FORWARD_KWARGS = ("output_processor", "output_processor_context")

# what the forward passes a processor: megatron-core 0.18.0's _postprocess, in order
# (``context`` is the caller's output_processor_context, as given)
PROCESSOR_KWARGS = (
    "hidden_states", "output_layer", "output_weight", "labels", "loss_mask", "input_ids",
    "position_ids", "attention_mask", "decoder_input", "inference_context",
    "packed_seq_params", "runtime_gather_output", "context", "compute_language_model_loss",
    "scale_logits", "config",
)


class OutputProcessor(Protocol):
    """A processor: called with :data:`PROCESSOR_KWARGS` (and whatever keywords a later
    release adds) as keyword arguments; what it returns is the forward's result."""

    def __call__(self, **hook_kwargs: Any) -> Any: ...
