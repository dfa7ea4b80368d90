"""finalize's row flags and the rule the log-prob backward applies with them.

``valid`` (bool [N]): the row's label is counted (not ``ignore_index``); ``bad`` (bool [N]):
its label is out of range (ops/label_check.py: the row's gradient is NaN, never a
plausible wrong number). finalize makes the two together, so a stage takes both or
neither. A leaf: the torch path (ops/torch_chunked.py) and the Triton backward
(kernels/logprob_backward.py, which applies the same rule inside its kernel) share it.
"""

from __future__ import annotations

import torch


def check_pair(valid: torch.Tensor | None, bad: torch.Tensor | None) -> None:
    if (valid is None) != (bad is None):
        raise ValueError("valid and bad are finalize's row flags: pass both or neither "
                         f"(got {'bad' if valid is None else 'valid'} alone)")


def masked_row_grads(grad_logprob: torch.Tensor, grad_entropy: torch.Tensor | None,
                     valid: torch.Tensor | None, bad: torch.Tensor | None, *,
                     bad_as_nan: bool = True):
    """The rows' gradients as the backward takes them (ops/stages.py): the log-prob's 0
    where not ``valid`` and NaN where ``bad``, the entropy's 0 where not valid.
    ``bad_as_nan=False``: a bad row's log-prob gradient is 0 instead (fp16's loss scale is
    the max of the finite ones, so that one bad row does not make every row NaN)."""
    check_pair(valid, bad)
    if valid is not None:
        grad_logprob = torch.where(valid, grad_logprob, 0.0)
        if grad_entropy is not None:
            grad_entropy = torch.where(valid, grad_entropy, 0.0)
        grad_logprob = torch.where(bad, float("nan") if bad_as_nan else 0.0, grad_logprob)
    return grad_logprob, grad_entropy
