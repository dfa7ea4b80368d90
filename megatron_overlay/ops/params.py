"""Options of the fused log-prob op, validated once at the boundary."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .temperature import validate_temperature  # noqa: F401  (also re-exported from here)

DEFAULT_IGNORE_INDEX = -100
# logits_dtype: how each logit is rounded before the softmax, as a head in that dtype
# rounds F.linear's output. None (the default) keeps the fp32 accumulators: an fp32 head.
LOGITS_DTYPES = {"float32": None, "fp32": None, "bfloat16": torch.bfloat16,
                 "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def resolve_logits_dtype(logits_dtype):
    """None, a torch dtype or one of LOGITS_DTYPES' names -> None, bfloat16 or float16."""
    if logits_dtype is None or logits_dtype == torch.float32:
        return None
    if logits_dtype in (torch.bfloat16, torch.float16):
        return logits_dtype
    if isinstance(logits_dtype, str) and logits_dtype in LOGITS_DTYPES:
        return LOGITS_DTYPES[logits_dtype]
    raise TypeError(f"logits_dtype must be None or torch.float32 (fp32 logits, the default), "
                    f"torch.bfloat16 or torch.float16 (each logit rounded to it before the "
                    f"softmax, as a head in that dtype does), or one of {sorted(LOGITS_DTYPES)}; "
                    f"got {logits_dtype!r}")


@dataclass(frozen=True)
class LogprobParams:
    # A float, or a tensor of per-token temperatures (ops/temperature.py)
    temperature: "float | torch.Tensor" = 1.0
    return_entropy: bool = True
    ignore_index: int = DEFAULT_IGNORE_INDEX
    # None: $MEGATRON_OVERLAY_STRICT_LABELS decides (ops/label_check.py); True: check the
    # label range on the host before any work (one device sync per call on CUDA)
    strict_labels: bool | None = None
    logits_dtype: "torch.dtype | None" = None  # see LOGITS_DTYPES; a name is resolved
    # the batch size where the ops' token rows are a [batch, seq] tensor's flattened
    # position-major (the processors' order): label errors name [batch, position] places
    token_batch: "int | None" = None

    def __post_init__(self):
        validate_temperature(self.temperature)
        object.__setattr__(self, "logits_dtype", resolve_logits_dtype(self.logits_dtype))
        if not isinstance(self.return_entropy, bool):
            raise TypeError(f"return_entropy must be a bool, got {type(self.return_entropy).__name__}")
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index,
                                                                 numbers.Integral):
            raise TypeError(f"ignore_index must be an int (default {DEFAULT_IGNORE_INDEX}), "
                            f"got {type(self.ignore_index).__name__}")
        # numpy's integers too; the kernels compare labels against a Python int
        object.__setattr__(self, "ignore_index", int(self.ignore_index))
        if self.strict_labels is not None and not isinstance(self.strict_labels, bool):
            raise TypeError(f"strict_labels must be a bool or None, got "
                            f"{type(self.strict_labels).__name__}")

