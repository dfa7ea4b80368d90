"""Fused output-layer ops: autograd Functions over a torch path and Triton kernels.

Nothing here knows about megatron.
"""

from .label_check import check_labels
from .linear_logprob import LinearLogprobEntropy, linear_logprob_entropy, pick_impl
from .params import LogprobParams

__all__ = ["LinearLogprobEntropy", "LogprobParams", "check_labels", "linear_logprob_entropy",
           "pick_impl"]
