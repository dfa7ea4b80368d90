"""Options of the fused log-prob op, validated once at the boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_IGNORE_INDEX = -100


@dataclass(frozen=True)
class LogprobParams:
    temperature: float = 1.0
    return_entropy: bool = True
    ignore_index: int = DEFAULT_IGNORE_INDEX
    # None: $MEGATRON_OVERLAY_STRICT_LABELS decides (ops/label_check.py); True: check the
    # label range on the host before any work (one device sync per call on CUDA)
    strict_labels: bool | None = None

    def __post_init__(self):
        validate_temperature(self.temperature)
        if not isinstance(self.return_entropy, bool):
            raise TypeError(f"return_entropy must be a bool, got {type(self.return_entropy).__name__}")
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index, int):
            raise TypeError(f"ignore_index must be an int (default {DEFAULT_IGNORE_INDEX}), "
                            f"got {type(self.ignore_index).__name__}")
        if self.strict_labels is not None and not isinstance(self.strict_labels, bool):
            raise TypeError(f"strict_labels must be a bool or None, got "
                            f"{type(self.strict_labels).__name__}")

    @property
    def inv_temperature(self) -> float:
        return 1.0 / float(self.temperature)


def validate_temperature(temperature) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a float, got {type(temperature).__name__}; "
                        f"pass e.g. temperature=0.7")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature}; "
                         f"use 1.0 for the unscaled distribution")
