"""``kernels.launch.launch``'s cache key against Triton's own specialization (CPU).

``launch`` reuses a compiled kernel for every argument list whose key equals one it has
launched; that is only safe if equal keys mean equal Triton specializations (same dtypes,
same 16-byte divisibility, the same constant 1, the same integer width). Checked here
against ``native_specialize_impl``, what Triton's binder calls for each argument; the GPU
test (test_triton_gpu.py) launches a kernel through both paths.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed")
libtriton = pytest.importorskip("triton._C.libtriton")
if not hasattr(libtriton, "native_specialize_impl"):
    pytest.skip("this Triton has no native_specialize_impl to compare with",
                allow_module_level=True)

from triton.backends.compiler import BaseBackend  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from megatron_overlay.ops.kernels import launch  # noqa: E402


def _tritons(arg):
    return libtriton.native_specialize_impl(BaseBackend, arg, False, True, True)


def _samples():
    base = torch.zeros(4096, dtype=torch.float32)
    out = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                  torch.int8, torch.bool):
        t = torch.zeros(512, dtype=dtype)
        out += [t, t[1:], t[8:], t[16:], t.view(32, 16).t()]
    out += [base[3:], torch.nn.Parameter(base[4:]), base.view(64, 64)[:, 1:]]
    out += [0, 1, 2, 15, 16, 17, 32, -1, -16, -17, 2 ** 31 - 16, 2 ** 31 - 1, 2 ** 31,
            -2 ** 31, -2 ** 31 - 16, 2 ** 40, 2 ** 63 - 16, 2 ** 63, 2 ** 64 - 16]
    out += [0.0, 1.0, 0.7, -3.5, 1e300, True, False, None]
    w = torch.zeros(256, 64, dtype=torch.bfloat16)
    out += [TensorDescriptor.from_tensor(w, [64, 32]), TensorDescriptor.from_tensor(w, [32, 32]),
            TensorDescriptor.from_tensor(w.float(), [64, 32]),
            TensorDescriptor.from_tensor(w[:, 16:], [64, 16])]
    return out


def test_launch_key_refines_tritons():
    """Equal keys, equal Triton specializations: the key may split what Triton merges
    (an extra cache entry), never the other way."""
    seen = {}
    for arg in _samples():
        key = launch._specialization([arg])
        assert key is not None, f"no key for {arg!r}"
        theirs = _tritons(arg)
        assert seen.setdefault(key, theirs) == theirs, (
            f"key {key} covers both {seen[key]} and {theirs} (argument {arg!r})")
    # and every distinct specialization of Triton's showed up (the samples reach them)
    assert len({v for v in seen.values()}) >= 20


def test_launch_key_tells_bool_from_one():
    # True == 1 in Python, but Triton compiles a bool as u1 and the int 1 as a constant
    assert launch._specialization([True]) != launch._specialization([1])
    assert launch._specialization([1.0]) != launch._specialization([1])


def test_launch_key_refuses_unknown_types():
    class Tensorish(torch.Tensor):
        pass
    assert launch._specialization([object()]) is None
    assert launch._specialization([torch.zeros(2).as_subclass(Tensorish)]) is None


def test_launch_sees_hooks():
    """A profiler's launch hook sends launches through Triton's own path (which calls it);
    Triton's empty hook chains do not."""
    from triton import knobs
    assert not launch._hooked()
    chain = knobs.runtime.launch_enter_hook
    hook = lambda metadata: None  # noqa: E731
    if hasattr(chain, "add"):
        chain.add(hook)
        try:
            assert launch._hooked()
        finally:
            chain.remove(hook)
    else:
        knobs.runtime.launch_enter_hook = hook
        try:
            assert launch._hooked()
        finally:
            knobs.runtime.launch_enter_hook = chain
    assert not launch._hooked()


@pytest.mark.parametrize("group, name", [("runtime", "debug"), ("language", "default_fp_fusion")])
def test_launch_key_follows_the_compile_knobs(group, name):
    """TRITON_DEBUG (``knobs.runtime.debug``) compiles device asserts in, fp fusion changes
    the arithmetic: a kernel cached before one is switched must not be launched after (nor
    the other way)."""
    from triton import knobs
    section = getattr(knobs, group, None)
    if section is None or not hasattr(section, name):
        pytest.skip(f"this Triton has no knobs.{group}.{name}")
    before = launch._compile_knobs()
    old = getattr(section, name)
    setattr(section, name, not old)
    try:
        assert launch._compile_knobs() != before
    finally:
        setattr(section, name, old)
    assert launch._compile_knobs() == before


def test_a_stages_inspection_hook_takes_tritons_path():
    from triton import knobs
    if not hasattr(knobs.runtime, "add_stages_inspection_hook"):
        pytest.skip("this Triton has no stages-inspection hook")
    assert not launch._hooked()
    knobs.runtime.add_stages_inspection_hook = lambda *a: ("key", "hash")
    try:
        assert launch._hooked()
    finally:
        knobs.runtime.add_stages_inspection_hook = None
    assert not launch._hooked()
