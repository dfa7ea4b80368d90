"""Output processors for the ``output_processor`` hook, selectable by name.

Built-ins: ``"fused_logprob"``, ``"fused_ce_loss"``, ``"fused_topk_logprobs"``,
``"fused_logprobs_at"``, ``"logits"``. Importing this package
does not import torch; resolving a name does.
"""

from .registry import ENTRY_POINT_GROUP, available, register, resolve

__all__ = ["ENTRY_POINT_GROUP", "available", "register", "resolve"]
