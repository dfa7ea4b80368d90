"""Imports every built-in processor module so that each registers itself."""

from . import fused_logprob, logits  # noqa: F401
