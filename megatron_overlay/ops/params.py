"""Options of the fused log-prob op, validated once at the boundary."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from .temperature import validate_temperature  # noqa: F401  (also re-exported from here)

DEFAULT_IGNORE_INDEX = -100
# logits_dtype: how each logit is rounded before the softmax, as a head in that dtype
# rounds F.linear's output. None (the default) keeps the fp32 accumulators: an fp32 head.
LOGITS_DTYPES = {"float32": None, "fp32": None, "bfloat16": torch.bfloat16,
                 "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def check_flag(value, name: str, allow_none: bool = False):
    """``value`` as a bool (numpy's bool too, as a config may hold one), or None where
    ``allow_none``; else a TypeError naming ``name``."""
    if value is None and allow_none or isinstance(value, bool):
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"):
        return bool(value)
    where = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    raise TypeError(f"{name} must be a bool{' or None' if allow_none else ''}, got "
                    f"{where}{kind.__name__} {value!r:.40}")


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
        object.__setattr__(self, "return_entropy",
                           check_flag(self.return_entropy, "return_entropy"))
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index,
                                                                 numbers.Integral):
            raise TypeError(f"ignore_index must be an int (default {DEFAULT_IGNORE_INDEX}), "
                            f"got {type(self.ignore_index).__name__}")
        # numpy's integers too; the kernels compare labels against a Python int
        object.__setattr__(self, "ignore_index", int(self.ignore_index))
        if not -2 ** 63 <= self.ignore_index < 2 ** 63:  # labels are int64 at the widest
            raise ValueError(f"ignore_index must fit int64 (the labels' dtype), got "
                             f"{self.ignore_index}; the default is {DEFAULT_IGNORE_INDEX}")
        object.__setattr__(self, "strict_labels",
                           check_flag(self.strict_labels, "strict_labels", allow_none=True))

    @classmethod
    def of(cls, **options) -> "LogprobParams":
        """``LogprobParams(**options)``, the same options given as the same plain values
        (floats, ints, bools, None, strings, dtypes) answered from a cache: the checks
        above took 4-8 us of a call's own Python on the CPU machine (a synchronized call
        of 256 tokens waits for all of it; docs/BENCHMARKS.md, pass 24). The key
        holds each value's type with it (True, 1 and 1.0 are equal and hash alike in
        Python, but only True passes as a flag), and the instances are frozen; a tensor
        temperature, or any other value, is checked afresh every call."""
        key = []
        for name, value in options.items():
            kind = type(value)
            if kind not in _PLAIN:
                return cls(**options)
            key += (name, kind, value)
        key = tuple(key)
        params = _params_cache.get(key)
        if params is None:
            params = cls(**options)  # raises (and caches nothing) where a value is bad
            if len(_params_cache) >= _PARAMS_CACHE_MAX:
                _params_cache.clear()
            _params_cache[key] = params
        return params


_PLAIN = frozenset({float, int, bool, type(None), str, torch.dtype})
_params_cache: dict = {}  # LogprobParams.of's: (name, type, value, ...) -> params
_PARAMS_CACHE_MAX = 256


class FinalizeRequest(NamedTuple):
    """The top-k stage's ``finalize`` argument (ops/stages.py): finalize's arguments beside
    the statistics, so that a stage gives finalize's outputs itself where no TP merge
    comes between them (the Triton stage: in its last kernel's launch)."""
    labels: "torch.Tensor | None"  # [N] global ids, as finalize's
    vocab_size: int
    ignore_index: int
    record_alloc: "Callable | None" = None  # stages.RecordAlloc
