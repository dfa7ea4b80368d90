"""Fused output-layer ops: autograd Functions over a torch path and Triton kernels.

Nothing here knows about megatron.
"""

from .label_check import check_labels
from .linear_logprob import LinearLogprobEntropy, linear_logprob_entropy
from .linear_logprobs_at import LinearLogprobsAt, linear_logprobs_at
from .linear_topk import LinearTopkLogprobs, TopkLogprobs, linear_topk_logprobs
from .params import LogprobParams
from .stages import pick_impl

__all__ = ["LinearLogprobEntropy", "LinearLogprobsAt", "LinearTopkLogprobs", "LogprobParams",
           "TopkLogprobs", "check_labels", "linear_logprob_entropy", "linear_logprobs_at",
           "linear_topk_logprobs", "pick_impl"]
