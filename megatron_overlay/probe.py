"""A capability probe for callers: will this model's forward take this ``output_processor``?

A callable needs only the hook (``output_processor`` / ``output_processor_context``
keyword-only parameters). A *name* also needs the overlay's name lookup in the core: a
native 0.18/0.19 core has the hook but, unpatched, calls the string itself and fails deep
inside megatron with ``TypeError: 'str' object is not callable``.
"""

from __future__ import annotations

import functools
import inspect
import sys
from pathlib import Path

from .hook import FORWARD_KWARGS

GPT_MODEL_MODULE = "megatron.core.models.gpt.gpt_model"
# the line the overlay's patch puts in every patched gpt_model.py (see patches/*/)
NAME_LOOKUP_SOURCE = "from megatron_overlay.processors import resolve"


def has_output_processor(model) -> bool:
    """True when ``model.forward`` takes both hook parameters as keyword-only parameters."""
    forward = getattr(model, "forward", None)
    if forward is None:
        return False
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False
    return all(name in params and params[name].kind is inspect.Parameter.KEYWORD_ONLY
               for name in FORWARD_KWARGS)


def require_output_processor(model, processor=None) -> None:
    """Raise unless ``model(..., output_processor=processor)`` will be accepted.

    ``processor``: None (just the hook), a callable (needs the hook only), or a name (needs
    the hook, the overlay's name lookup in the core, and the name registered: an unknown
    name raises ``ValueError`` listing the known ones). A missing capability raises
    ``RuntimeError`` naming the core, its state and the fix.

    Signature introspection and file hashes, never a version compare: dev builds and local
    labels pass whenever the hook is really there.
    """
    if not has_output_processor(model):
        _raise_missing_hook(model)
    if processor is None or callable(processor):
        return
    from .processors import resolve

    func = resolve(processor)  # TypeError for a non-str, ValueError for an unknown name
    if not _core_resolves_names(model):
        _raise_no_name_lookup(model, processor, func)


def _model_core_site(model) -> Path | None:
    """The site directory (holding megatron/) of the megatron the model's forward comes from."""
    func = getattr(model, "forward", None)
    func = getattr(func, "__func__", func)
    while isinstance(func, functools.partial):
        func = func.func
    module_name = getattr(func, "__module__", None) or ""
    if not module_name.startswith("megatron."):
        module_name = GPT_MODEL_MODULE  # a subclass defined elsewhere: the imported GPTModel
    source = getattr(sys.modules.get(module_name), "__file__", None)
    if source is None:
        return None
    return Path(source).parents[module_name.count(".")]  # megatron/core/... -> the site


def _core_status(model):
    """patching.status of the model's core (the default core when it cannot be told)."""
    from . import patching

    site = _model_core_site(model)
    return patching.status(site) if site is not None else patching.status()


def _core_resolves_names(model) -> bool:
    st = _core_status(model)
    if st.core_version is not None:
        return st.name_lookup
    # a megatron without distribution metadata (a source checkout on the path): its source
    site = _model_core_site(model)
    gpt_model = site / (GPT_MODEL_MODULE.replace(".", "/") + ".py") if site else None
    try:
        return gpt_model is not None and NAME_LOOKUP_SOURCE in gpt_model.read_text()
    except OSError:
        return False


def _where(st) -> str:
    if st.core_version is None:
        return f"no megatron-core distribution ({st.detail})"
    applied = "applied" if st.name_lookup else "not applied"
    return (f"megatron-core {st.core_version} in {st.site} ({st.state}"
            f"{f'; overlay patch set {st.patch_set} {applied}' if st.patch_set else ''})")


def _reinstall(st) -> str:
    return (f"reinstall it (`pip install --force-reinstall --no-deps megatron-core=="
            f"{st.release}`) and run `megatron-overlay patch`")


def _raise_missing_hook(model) -> None:
    from . import patching

    st = _core_status(model)
    if st.state == patching.UNPATCHED:
        fix = "run `megatron-overlay patch` in this environment"
    elif st.state == patching.MODIFIED:
        fix = _reinstall(st)
    elif st.state == patching.UNSUPPORTED:
        fix = ("install a supported release (megatron-core 0.12.0-0.19.2) and run "
               "`megatron-overlay patch`")
    elif (_hooked_class(model, st) is None and st.patch_set and not st.name_lookup
          and _first_class_in(model, _patch_set_models(st))):  # a class the patch set hooks
        others = [c for c in _patch_set_models(st) if c != "GPTModel"]
        fix = (f"run `megatron-overlay patch` in this environment: upstream megatron-core "
               f"{st.release} has the hook on GPTModel only, and the overlay's patch set "
               f"back-ports it to {', '.join(others)}")
    else:
        fix = (f"the model's forward is not the forward of a hooked megatron model class "
               f"({', '.join(st.models) or 'none'}); a wrapper or another class? Call it on "
               f"the megatron model itself")
    raise RuntimeError(
        f"{type(model).__name__}.forward has no output_processor/output_processor_context "
        f"keyword parameters. Installed: {_where(st)}. Fix: {fix}.")


def _patch_set_models(st) -> list[str]:
    """The model classes the patch set serving this core hooks, once applied."""
    from .patching import match_patch_set
    from .patching.core import sha256_of

    patch_set = match_patch_set(st.release, lambda rel: sha256_of(Path(st.site) / rel))
    return [cls for cls, _ in patch_set.models] if patch_set else []


def _first_class_in(model, names) -> str | None:
    """The first class in the model's MRO named in ``names``."""
    return next((c.__name__ for c in type(model).__mro__ if c.__name__ in names), None)


def _hooked_class(model, st) -> str | None:
    """The first class in the model's MRO whose forward carries the hook in this state."""
    return _first_class_in(model, st.models)


def _raise_no_name_lookup(model, name: str, func) -> None:
    from . import patching

    st = _core_status(model)
    release = st.release or "<release>"
    if st.state == patching.MODIFIED:
        fix = _reinstall(st)
    else:
        fix = (f"run `megatron-overlay patch` in this environment; or install the overlay's "
               f"patched wheel (`megatron-overlay wheel {release} --out wheelhouse`, then "
               f"`pip install --force-reinstall --no-deps --find-links wheelhouse "
               f"megatron-core=={release}`)")
    raise RuntimeError(
        f"output_processor={name!r} is a name, which needs the overlay's name lookup in the "
        f"core, and {_where(st)} does not have it (an upstream 0.18+ core calls the string "
        f"itself: TypeError: 'str' object is not callable). Fix: {fix}; or pass the "
        f"callable, which needs no patch: `from {func.__module__} import {func.__name__}` "
        f"and output_processor={func.__name__}.")
