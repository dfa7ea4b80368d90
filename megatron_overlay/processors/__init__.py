"""Output processors for the ``output_processor`` hook, selectable by name.

Built-ins: ``"fused_logprob"``, ``"fused_ce_loss"``, ``"logits"``. Importing this package
does not import torch; resolving a name does.
"""

from .registry import ENTRY_POINT_GROUP, available, register, resolve

__all__ = ["ENTRY_POINT_GROUP", "available", "register", "resolve"]
