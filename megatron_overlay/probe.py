"""A capability probe for callers: does this model's forward take ``output_processor``?"""

from __future__ import annotations

import inspect

HOOK_PARAMS = ("output_processor", "output_processor_context")


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
               for name in HOOK_PARAMS)


def require_output_processor(model) -> None:
    """Raise ``RuntimeError`` naming the core, its state and the fix when the hook is missing.

    Signature introspection, never a version compare: dev builds and local labels pass
    whenever the hook is really there.
    """
    if has_output_processor(model):
        return
    from . import patching

    st = patching.status()
    where = (f"megatron-core {st.core_version} ({st.state}"
             f"{', patch set ' + st.patch_set if st.patch_set else ''})"
             if st.core_version else "no megatron-core distribution")
    if st.state == patching.UNPATCHED:
        fix = "run `megatron-overlay patch` in this environment"
    elif st.state == patching.MODIFIED:
        fix = (f"reinstall it (`pip install --force-reinstall --no-deps megatron-core=="
               f"{st.release}`) and run `megatron-overlay patch`")
    elif st.state == patching.UNSUPPORTED:
        fix = ("install a supported release (megatron-core 0.12.0-0.19.2) and run "
               "`megatron-overlay patch`")
    else:
        fix = ("the model's forward is not megatron's GPTModel.forward (a wrapper or another "
               "model class?): call it on the GPTModel itself")
    raise RuntimeError(
        f"{type(model).__name__}.forward has no output_processor/output_processor_context "
        f"keyword parameters. Installed: {where}. Fix: {fix}.")
