"""Input checks of the fused ops: shapes, dtypes, devices and id ranges.

Errors name the argument and the fix. The id ranges are checked here on CPU and in strict
mode (one sync on CUDA); otherwise on the device, inside the op, and raised later without
a sync (ops/label_check.py).
"""

from __future__ import annotations

import torch

from . import label_check
from .params import LogprobParams

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def validate_inputs(hidden, weight, labels, params: LogprobParams, vocab_size: int) -> None:
    """Shapes, dtypes, devices and label range; errors name the argument and the fix."""
    validate_matrices(hidden, weight)
    if not isinstance(labels, torch.Tensor) or labels.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"labels must be an int64 (or int32) tensor of token ids, got "
                        f"{labels.dtype if isinstance(labels, torch.Tensor) else type(labels)}; "
                        f"pass e.g. labels.long()")
    if labels.dtype == torch.int32 and not -2 ** 31 <= params.ignore_index < 2 ** 31:
        # torch and Triton compare int32 labels with it cast to int32, where it wraps (an
        # ignore_index of -2^32 - 100 would ignore the label -100)
        raise ValueError(f"ignore_index={params.ignore_index} does not fit the int32 labels; "
                         f"pass labels.long(), or an ignore_index within int32")
    if labels.shape != hidden.shape[:1]:
        raise ValueError(f"labels must have shape [{hidden.shape[0]}] (one id per token), got "
                         f"{tuple(labels.shape)}")
    if labels.device != hidden.device or weight.device != hidden.device:
        raise ValueError(f"hidden ({hidden.device}), weight ({weight.device}) and labels "
                         f"({labels.device}) must be on one device; move them, e.g. "
                         f"labels.to(hidden.device)")
    # The label range: here on CPU and in strict mode (one sync on CUDA); otherwise on the
    # device, inside the op, raised later without a sync (ops/label_check.py).
    strict = label_check.strict_mode(params.strict_labels)  # read (and checked) everywhere
    if not labels.is_cuda or strict:
        label_check.check_eagerly(labels, vocab_size, params.ignore_index, params.token_batch)


def global_vocab(weight, world: int) -> int:
    """The vocab size of ``world`` shards like ``weight`` [V_local, H]; 0 where ``weight``
    is not a 2-D tensor (before validation: validate_matrices' error then names it)."""
    return weight.shape[0] * world if isinstance(weight, torch.Tensor) and weight.dim() == 2 \
        else 0


def validate_matrices(hidden, weight) -> None:
    """hidden [N, H] and weight [V, H]: shapes and dtypes (shared by the fused ops)."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        raise ValueError(f"hidden must be a 2-D [tokens, hidden] tensor, got "
                         f"{tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden)}")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError("weight must be a 2-D [vocab, hidden] tensor")
    if hidden.dtype not in _FLOAT_DTYPES or weight.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"hidden and weight must be float32, bfloat16 or float16, got "
                        f"{hidden.dtype} and {weight.dtype}; cast, e.g. hidden.float()")
    if hidden.dtype != weight.dtype and torch.float32 not in (hidden.dtype, weight.dtype):
        raise TypeError(f"hidden ({hidden.dtype}) and weight ({weight.dtype}): the operands "
                        f"must share a dtype, or one of them be float32; cast one, e.g. "
                        f"hidden.to(weight.dtype)")
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden size mismatch: hidden is {tuple(hidden.shape)}, weight is "
                         f"{tuple(weight.shape)}; weight must be [vocab, {hidden.shape[1]}]")
    if weight.device != hidden.device:
        raise ValueError(f"hidden is on {hidden.device} but weight is on {weight.device}; "
                         f"move one, e.g. weight.to(hidden.device)")


def validate_token_ids(token_ids, n_tokens: int, vocab_size: int, device, name="token_ids",
                       strict: bool | None = None, batch: int | None = None):
    """[N, K] int64 ids in [0, vocab_size); errors name ``name`` and the fix.

    The range: checked here on CPU and in strict mode (``strict``, else
    $MEGATRON_OVERLAY_STRICT_LABELS; one sync on CUDA); otherwise on the device inside the
    op, raised later without a sync (ops/label_check.py); ``batch``: the processors' batch
    size, as label_check.check_eagerly's."""
    if not isinstance(token_ids, torch.Tensor) or token_ids.dtype not in (torch.int64,
                                                                          torch.int32):
        got = token_ids.dtype if isinstance(token_ids, torch.Tensor) else type(token_ids).__name__
        raise TypeError(f"{name} must be an int64 tensor of vocab ids, got {got}; pass e.g. "
                        f"{name}.long()")
    if token_ids.dim() != 2 or token_ids.shape[0] != n_tokens or token_ids.shape[1] < 1:
        raise ValueError(f"{name} must have shape [{n_tokens}, k] (k >= 1 ids per token), "
                         f"got {tuple(token_ids.shape)}")
    if token_ids.device != device:
        raise ValueError(f"{name} is on {token_ids.device} but the hidden states are on "
                         f"{device}; move it, e.g. {name}.to(hidden.device)")
    if label_check.strict_mode(strict) or not token_ids.is_cuda:
        label_check.check_ids_eagerly(token_ids, vocab_size, name, batch)
