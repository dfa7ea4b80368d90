"""The one reader of the hook's ``output_processor_context`` that every processor shares.

A processor declares the keys it accepts, with their defaults, and calls :func:`read_context`:

    values = read_context(context, {"temperature": 1.0, "k": REQUIRED}, "fused_topk")

The context may be None (all defaults), a mapping, or any object with attributes; a
value (a number, string, sequence, set, iterator, tensor or array:
``output_processor_context=0.7``) is a ``TypeError``, where it would otherwise run at
every default.
A *mapping* is the caller's own spelling of the options, so an unknown key is an error (a
misspelled ``"temprature"`` would otherwise run silently at the default); an *object* — a
framework's config dataclass, say verl's — may carry any other attributes, and only the
accepted ones are read. Values are returned as given: the processor's options object (e.g.
``ops.params.LogprobParams``) validates them.
"""

from __future__ import annotations

import difflib
import numbers
import sys
from collections.abc import Iterator, Set
from typing import Any, Mapping, Sequence


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the "default" of a key the caller must give


def read_context(context: Any, accepted: Mapping[str, Any], processor: str) -> dict[str, Any]:
    """``{key: value}`` for every key in ``accepted``: the context's value or the default."""
    if context is None:
        values = {}
    elif _is_value(context):
        # e.g. output_processor_context=0.7: read as an object it has no attribute
        # "temperature", and the call would run at T = 1 without a word
        raise TypeError(f"{processor}: output_processor_context must be None, a mapping "
                        f"(e.g. {{'temperature': 0.7}}) or an object with attributes (e.g. "
                        f"a dataclass), got {type(context).__name__} {context!r:.60}")
    elif isinstance(context, Mapping):
        unknown = [key for key in context if key not in accepted]
        if unknown:
            raise ValueError(_unknown_keys_message(unknown, accepted, processor))
        values = {key: context[key] for key in accepted if key in context}
    else:
        values = {key: getattr(context, key) for key in accepted if hasattr(context, key)}
    missing = [key for key, default in accepted.items()
               if default is REQUIRED and key not in values]
    if missing:
        raise ValueError(f"{processor} needs output_processor_context key(s) "
                         f"{', '.join(map(repr, missing))}; accepted keys: "
                         f"{_describe(accepted)}")
    return {key: values.get(key, default) for key, default in accepted.items()}


def _is_value(context: Any) -> bool:
    """A number, string, sequence, set, iterator, tensor or array (numpy's, or anything
    with ``__array__``): a value, not options (a named tuple has its options as
    attributes)."""
    if isinstance(context, tuple) and hasattr(context, "_fields"):
        return False
    if isinstance(context, (numbers.Number, str, bytes, Sequence, Set, Iterator)):
        return True
    if hasattr(type(context), "__array__"):  # np.array(0.7) is no Number nor Sequence
        return True
    torch = sys.modules.get("torch")  # a tensor exists only where torch is imported
    return torch is not None and isinstance(context, torch.Tensor)


def _describe(accepted: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} (required)" if default is REQUIRED else f"{key} (default {default!r})"
                     for key, default in accepted.items())


def _unknown_keys_message(unknown: list, accepted: Mapping[str, Any], processor: str) -> str:
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), list(accepted), n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (f"{processor}: unknown output_processor_context key(s) {', '.join(hints)}; "
            f"accepted keys: {_describe(accepted)}. A mapping context may hold only these; "
            f"to carry other fields, pass an object with attributes instead")
