"""Imports every built-in processor module so that each registers itself."""

from . import fused_logprob, fused_logprobs_at, fused_topk_logprobs, logits  # noqa: F401
