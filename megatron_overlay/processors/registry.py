"""Output processors by name.

A processor is any callable with megatron-core 0.18's ``output_processor`` signature (16
keyword arguments). Built-ins register themselves on import; third-party packages register
through the ``megatron_overlay.output_processors`` entry-point group
(``name = "package.module:callable"``). The overlay core's forward calls :func:`resolve`
when it is given a string, so a name works wherever a callable does.
"""

from __future__ import annotations

import importlib.metadata
from typing import Callable

ENTRY_POINT_GROUP = "megatron_overlay.output_processors"
_REGISTRY: dict[str, Callable] = {}
_BUILTINS_LOADED = False


def register(name: str):
    """Decorator: make ``func`` resolvable as ``output_processor=name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"processor name must be a non-empty string, got {name!r}")

    def decorator(func: Callable) -> Callable:
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not func:
            raise ValueError(f"output processor {name!r} is already registered ({existing!r})")
        _REGISTRY[name] = func
        return func

    return decorator


def _load() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from . import builtin  # noqa: F401  (registers the built-ins)

    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in _REGISTRY:
            _REGISTRY[entry.name] = entry.load()


def available() -> list[str]:
    """The names :func:`resolve` accepts."""
    _load()
    return sorted(_REGISTRY)


def resolve(name_or_callable) -> Callable:
    """A processor from its registered name; a callable is returned as it is."""
    if callable(name_or_callable):
        return name_or_callable
    if not isinstance(name_or_callable, str):
        raise TypeError(
            f"output_processor must be a callable or a registered name (str), "
            f"got {type(name_or_callable).__name__}")
    _load()
    try:
        return _REGISTRY[name_or_callable]
    except KeyError:
        raise ValueError(
            f"unknown output_processor {name_or_callable!r}; known: {', '.join(available())}. "
            f"Register one with @megatron_overlay.processors.register(name) or the "
            f"{ENTRY_POINT_GROUP!r} entry-point group") from None
