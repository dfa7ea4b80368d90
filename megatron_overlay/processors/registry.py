"""Output processors by name.

A processor is any callable the hook can call (:class:`..hook.OutputProcessor`). The
built-ins are the table :data:`BUILTINS`; third-party packages register through the
``megatron_overlay.output_processors`` entry-point group (``name =
"package.module:callable"``) or :func:`register`. A built-in or an entry point is imported
only when its name is first resolved, so resolving one name imports only its own module
(torch for the built-ins), and a broken plugin never breaks another name. The overlay
core's forward calls :func:`resolve` when it is given a string, so a name works wherever a
callable does.
"""

from __future__ import annotations

import importlib
import importlib.metadata

from ..hook import OutputProcessor

ENTRY_POINT_GROUP = "megatron_overlay.output_processors"

# The built-in processors, the one list of their names: name -> "module:attribute".
BUILTINS = {
    "fused_logprob": "megatron_overlay.processors.fused_logprob:fused_logprob",
    "fused_ce_loss": "megatron_overlay.processors.fused_logprob:fused_ce_loss",
    "fused_topk_logprobs": "megatron_overlay.processors.fused_topk_logprobs:fused_topk_logprobs",
    "fused_logprobs_at": "megatron_overlay.processors.fused_logprobs_at:fused_logprobs_at",
    "logits": "megatron_overlay.processors.logits:logits",
}

_REGISTRY: dict[str, OutputProcessor] = {}  # loaded built-ins, register()ed, loaded plugins
_ENTRY_POINTS: dict[str, importlib.metadata.EntryPoint] | None = None  # found, not loaded


def _registered(name: str) -> OutputProcessor | None:
    """The processor registered or built in under ``name`` (a built-in imported now)."""
    if name not in _REGISTRY and name in BUILTINS:
        module, attribute = BUILTINS[name].split(":")
        _REGISTRY[name] = getattr(importlib.import_module(module), attribute)
    return _REGISTRY.get(name)


def register(name: str):
    """Decorator: make ``func`` resolvable as ``output_processor=name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"processor name must be a non-empty string, got {name!r}")

    def decorator(func: OutputProcessor) -> OutputProcessor:
        if not callable(func):  # as resolve() would hand it to the core to call
            raise TypeError(f"output processor {name!r} must be callable (a function taking "
                            f"the hook's keywords), got {type(func).__name__}")
        existing = _registered(name)
        if existing is not None and existing is not func:
            raise ValueError(f"output processor {name!r} is already registered ({existing!r})")
        _REGISTRY[name] = func
        return func

    return decorator


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The group's entry points by name, found from metadata; none is imported here, so a
    broken plugin can only break its own name (the first distribution found wins a name)."""
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        found: dict[str, importlib.metadata.EntryPoint] = {}
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(entry.name, entry)
        _ENTRY_POINTS = found
    return _ENTRY_POINTS


def _describe(entry: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    where = f"distribution {dist.name} {dist.version}" if dist is not None else "a distribution"
    return (f"the entry point `{entry.name} = {entry.value}` of {where} "
            f"(group {ENTRY_POINT_GROUP!r})")


def _load_entry_point(entry: importlib.metadata.EntryPoint) -> OutputProcessor:
    try:
        func = entry.load()
    except Exception as err:
        raise RuntimeError(
            f"output processor {entry.name!r} could not be loaded from {_describe(entry)}: "
            f"{type(err).__name__}: {err}. Fix or uninstall that package; other processor "
            f"names are unaffected") from err
    if not callable(func):
        raise TypeError(f"output processor {entry.name!r} from {_describe(entry)} is a "
                        f"{type(func).__name__}, not a callable")
    _REGISTRY[entry.name] = func
    return func


def available() -> list[str]:
    """The names :func:`resolve` accepts (none is imported to list it)."""
    return sorted(set(BUILTINS) | set(_REGISTRY) | set(_entry_points()))


def resolve(name_or_callable) -> OutputProcessor:
    """A processor from its registered name; a callable is returned as it is.

    Built-ins and ``register()``-ed names come first; a name only an entry point provides
    is imported the first time it is asked for.
    """
    if callable(name_or_callable):
        return name_or_callable
    if not isinstance(name_or_callable, str):
        raise TypeError(
            f"output_processor must be a callable or a registered name (str), "
            f"got {type(name_or_callable).__name__}")
    func = _registered(name_or_callable)
    if func is not None:
        return func
    entry = _entry_points().get(name_or_callable)
    if entry is not None:
        return _load_entry_point(entry)
    raise ValueError(
        f"unknown output_processor {name_or_callable!r}; known: {', '.join(available())}. "
        f"Register one with @megatron_overlay.processors.register(name) or the "
        f"{ENTRY_POINT_GROUP!r} entry-point group")
