"""Host-side helpers every stage launcher uses: devices, load paths, dot settings, arguments.

Paths, picked per call: on Hopper (sm_90+) with 16-byte-aligned rows the kernels read
through TMA tensor descriptors; elsewhere, and under ``TRITON_INTERPRET=1`` (whose
descriptor loads are wrong for 16-bit dtypes in Triton 3.7), through plain pointer loads.
The math is the same code either way (``_tiles.load_tile``).

Launches: ``launch(kernel, grid, *args, **constexprs)`` is ``kernel[grid](...)`` through a
cache of the compiled kernels (below).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.runtime import driver

try:
    from triton import knobs as _knobs  # Triton >= 3.4; imported once: launch() is hot
except ImportError:
    _knobs = None
_LANGUAGE_KNOBS = getattr(_knobs, "language", None)  # fp fusion's section (Triton >= 3.5)
from triton.tools.tensor_descriptor import TensorDescriptor

from . import autotune_configs
from ._tiles import load_tile


# fixed when the kernels are built (at import); read by every launch
_INTERPRETING = type(load_tile).__name__ == "InterpretedFunction"


def interpreting() -> bool:
    """True when the kernels were built for Triton's interpreter (TRITON_INTERPRET=1 at import)."""
    return _INTERPRETING


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of host ints. (``triton.cdiv`` and ``triton.next_power_of_2`` are
    ConstexprFunctions since Triton 3.5: ~1.3 us a call from host code, where each launch's
    arithmetic calls them a few times.)"""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (n >= 1), of a host int."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def check_device(*tensors: torch.Tensor) -> None:
    if interpreting():
        return
    for t in tensors:
        if not t.is_cuda:
            raise RuntimeError(
                f"the Triton kernels need CUDA tensors (got one on {t.device}); use "
                f"MEGATRON_OVERLAY_IMPL=torch on CPU, or set TRITON_INTERPRET=1 before "
                f"importing triton to run them in Triton's interpreter")


def mma_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the tensor cores multiply in: the operands' one, or for mixed operands
    (one fp32, one 16-bit) the 16-bit one, into which the fp32 operand is split
    (split_operand.py). The backward's d(logits) buffer is in it too."""
    return weight.dtype if hidden.dtype == torch.float32 else hidden.dtype


def lo_operand(hidden: torch.Tensor, weight: torch.Tensor) -> int:
    """The kernels' ``LO`` constexpr (``_tiles.mma_step``): 0 operands of one dtype, 1 fp32
    hidden states with a 16-bit weight, 2 a 16-bit hidden with an fp32 weight."""
    if hidden.dtype == weight.dtype:
        return 0
    return 1 if hidden.dtype == torch.float32 else 2


_LOGITS_TL_DTYPES = {None: None, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def logits_rounding(logits_dtype):
    """The kernels' ``LOGITS_DTYPE`` constexpr (``_tiles.round_logits``) for the stage
    contract's ``logits_dtype``: None (fp32 logits), bfloat16 or float16."""
    if logits_dtype not in _LOGITS_TL_DTYPES:
        raise TypeError(f"logits_dtype must be None, torch.bfloat16 or torch.float16 (the "
                        f"ops resolve names: ops/params.py), got {logits_dtype!r}")
    return _LOGITS_TL_DTYPES[logits_dtype]


# Device properties, looked up once per device: each lookup through torch costs the host
# microseconds on every call otherwise.
@functools.cache
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.cache
def _major(device_index: int) -> int:
    return torch.cuda.get_device_capability(device_index)[0]


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def sm_count(device: torch.device) -> int:
    """The device's multiprocessors (the interpreter's assumed count off CUDA)."""
    if device.type != "cuda":
        return autotune_configs.INTERPRETER_NUM_SMS
    return _multiprocessors(_index(device))


def tma_aligned(t: torch.Tensor) -> bool:
    return (t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0
            and (t.stride(0) * t.element_size()) % 16 == 0)


def tma_supported(*tensors: torch.Tensor) -> bool:
    """Hopper or newer, and every matrix fit for a TMA descriptor."""
    if interpreting() or not all(t.is_cuda for t in tensors):
        return False
    if _major(_index(tensors[0].device)) < 9:
        return False
    return all(tma_aligned(t) for t in tensors)


def default_tma(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """A stage's load path unless told: TMA where ``tma_supported``, and for mixed operands
    only where the 16-bit halves' rows (H x 2 bytes, split_operand.py) are 16-byte aligned
    too."""
    return tma_supported(hidden, weight) and (lo_operand(hidden, weight) == 0
                                              or hidden.shape[1] % 8 == 0)


def rowmajor(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def tile_source(t: torch.Tensor, block: list[int], tma: bool):
    """What a kernel's ``load_tile`` reads ``t`` through: a TMA descriptor or the pointer."""
    return TensorDescriptor.from_tensor(t, block) if tma else t


def dot_precision(dtype: torch.dtype) -> str:
    """For the tensor cores' ``dtype`` (``mma_dtype``)."""
    # fp32 inputs: 3xTF32 keeps fp32-level accuracy on the tensor cores; "ieee" would run
    # on the FMA units at a tenth of the speed. 16-bit inputs ignore the setting.
    if interpreting():
        return "ieee"
    return "tf32x3" if dtype == torch.float32 else "tf32"


def upcast_dot(dtype: torch.dtype) -> bool:
    # Triton 3.7's interpreter computes bf16 dots wrongly; fp32 operands give the same
    # products (bf16 -> fp32 is exact) with the same fp32 accumulation.
    return interpreting() and dtype == torch.bfloat16


def inv_t_args(inv_temperature):
    """(per-row fp32 [N] tensor or None, scalar kernel argument): the contract's
    inv_temperature, a float or an [N] tensor (kernels: ``ROW_INV_T``)."""
    if isinstance(inv_temperature, torch.Tensor):
        return inv_temperature.to(torch.float32).contiguous(), 1.0
    return None, float(inv_temperature)


# ----------------------------------------------------------------------------- launches
# ``kernel[grid](...)`` spends ~28 us of host time in Triton's JITFunction.run before the
# launcher proper (Triton 3.6 on an H200; docs/BENCHMARKS.md): it binds every argument into
# a dict, specializes each through the backend, builds and hashes the cache key, checks the
# kernel's globals and makes launch metadata; a forward call launches 2-8 kernels. ``launch``
# keeps each compiled kernel under its own key (the kernel, the constexprs and options as
# passed, the current device, and each runtime argument's specialization as Triton derives
# it: ``_specialization``) and calls the compiled kernel's launcher directly, as
# ``CompiledKernel.__getitem__`` does. The key also holds the Triton settings that
# JITFunction.run compiles into a kernel (``_compile_knobs``: TRITON_DEBUG's device
# asserts, fp fusion, ...), so that a kernel compiled before one is switched is not
# launched after it. A miss, the interpreter, and launch hooks (a profiler's) go through
# ``kernel[grid]``; so does an argument type the key does not know.
# The hit path is every call's host time (pass 21, docs/BENCHMARKS.md: about half of a
# 256-token top-k call's, profiled, in 6 launches), so it does no more than the key needs:
# the kernel by id (a JITFunction hashes in Python; the entry keeps it alive, so its id
# stays its own), one pass over the arguments, and the constexprs' values of the
# launcher's tail taken once, at the miss (the key holds every constexpr passed, so they
# are the same at every hit). Constexprs are keyed by value: 1, True and 1.0 would share
# an entry where Triton compiles them apart; every call site passes each constexpr in one
# type (ints, bools, strings, dtypes), which keeps them apart.
_compiled: dict = {}   # key -> (CompiledKernel, the launcher's tail values, the kernel,
#                                 its direct plan or None: below)
_I32_MIN, _I32_MAX, _U64_MIN = -2 ** 31, 2 ** 31 - 1, 2 ** 63
_TENSOR, _PARAMETER = torch.Tensor, torch.nn.Parameter


def _descriptor_specialization(d: TensorDescriptor):
    return (d.base.dtype, tuple(d.block_shape), d.padding)


def _specialization(args) -> tuple | None:
    """A key that tells apart every two argument lists Triton would compile apart (never
    fewer: ``test_launch_key_refines_tritons``); None for a type it does not know.
    Tensors: the dtype and the address's divisibility by 16; ints: 1 (Triton compiles it
    in as a constant), else divisibility by 16 and the width (i32, i64 or u64, by value);
    bools and floats: their type (one whatever the value); None itself."""
    key = []
    append = key.append
    for a in args:
        kind = type(a)
        if kind is _TENSOR or kind is _PARAMETER:
            append((a.dtype, a.data_ptr() % 16 == 0))
        elif kind is int:
            append(1 if a == 1 else (a % 16 == 0, 0 if _I32_MIN <= a <= _I32_MAX
                                     else 1 if a < _U64_MIN else 2))
        elif a is None:
            append(None)
        elif kind is float or kind is bool:
            append(kind)
        elif kind is TensorDescriptor:
            append(_descriptor_specialization(a))
        else:
            return None
    return tuple(key)


def launch(kernel, grid: tuple, *args, **constexprs) -> None:
    """``kernel[grid](*args, **constexprs)``: runtime arguments positional, constexprs and
    launch options (num_warps, ...) by keyword."""
    if _INTERPRETING or _hooked():
        kernel[grid](*args, **constexprs)
        return
    spec = _specialization(args)
    active = driver.active
    device = active.get_current_device()
    key = None if spec is None else (id(kernel), device, tuple(constexprs.items()), spec,
                                     _compile_knobs())
    hit = _compiled.get(key) if key is not None else None
    if hit is None:
        compiled = kernel[grid](*args, **constexprs)
        if key is not None and hasattr(compiled, "packed_metadata"):
            tail = tuple(constexprs.get(p.name, p.default) for p in kernel.params[len(args):])
            _compiled[key] = (compiled, tail, kernel, _direct_plan(compiled, len(args)))
        return
    compiled, tail, _, plan = hit
    n = len(grid)
    gx, gy, gz = grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1
    stream = active.get_current_stream(device)
    if plan is None or not direct:
        compiled.run(gx, gy, gz, stream, compiled.function, compiled.packed_metadata, None,
                     None, None, *args, *tail)
        return
    c_launch, cooperative, pdl, descriptors = plan
    if descriptors:
        args = list(args)
        for i, layout in descriptors:  # from the last: each expands in place
            args[i:i + 1] = _descriptor_args(args[i], layout)
    c_launch(gx, gy, gz, stream, compiled.function, cooperative, pdl, None, None,
             compiled.packed_metadata, None, None, None, *args, *tail)


# ---------------------------------------------------------------------- direct launches
# Of a hit's host time, Triton 3.6's launcher (``CompiledKernel.run``, a CudaLauncher) is
# the rest: a Python frame that allocates no scratch for these kernels, and for a kernel
# with TMA descriptors a Python loop over every argument that encodes each descriptor's
# CUtensorMap afresh (``make_tensordesc_arg``: a driver call) before the C launcher. A
# direct plan calls that C launcher itself, with the arguments CudaLauncher would give
# it, and takes each descriptor's expansion from a cache keyed by everything the
# CUtensorMap encodes (the address, shape, strides, padding and the kernel's TMA layout):
# the weight's is the same every call, and the caching allocator hands a microbatch's
# hidden states the same address call after call. A cached map names an address, never
# a tensor (nothing is kept alive); a tensor at that address with that geometry is
# exactly what it encodes. Only Triton 3.6's launcher, as taken apart below, is known;
# any other (a Triton of another version, a kernel that needs scratch memory) launches
# through ``compiled.run`` as before. ``direct = False`` does too (tests, A/B runs).
direct = True
_TRITON_LAUNCHER_KNOWN = triton.__version__.split(".")[:2] == ["3", "6"]
_WRAPPER_CELLS = {"launcher", "tensordesc_indices", "tensordesc_meta"}
_descriptor_maps: dict = {}   # (address, shape, strides, padding, layout) -> expansion
_DESCRIPTOR_MAPS_MAX = 512


def _direct_plan(compiled, n_args: int):
    """(C launcher, cooperative, pdl, ((argument index, TMA layout), ...) last first) of
    Triton 3.6's CudaLauncher, or None where ``compiled.run`` is not that launcher (one
    that does not come apart as below included: the kernel has launched by then, and
    keeps ``compiled.run``)."""
    try:
        return _take_apart(compiled, n_args)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _take_apart(compiled, n_args: int):
    run = getattr(compiled, "run", None)
    if not _TRITON_LAUNCHER_KNOWN or type(run).__name__ != "CudaLauncher":
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None  # allocated a launch at a time, by the launcher
    c_launch, descriptors = run.launch, ()
    code = getattr(c_launch, "__code__", None)
    if code is not None:  # wrap_handle_tensordesc's closure over the C launcher
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in c_launch.__closure__ or ())))
        if set(cells) != _WRAPPER_CELLS:
            return None
        indices = sorted(cells["tensordesc_indices"])
        metas = cells["tensordesc_meta"] or [None] * len(indices)
        if len(metas) != len(indices) or (indices and indices[-1] >= n_args):
            return None  # (the descriptors are runtime arguments, passed positionally)
        layouts = []
        for meta in metas:
            if meta is not None:  # what make_tensordesc_arg reads of it, hashable
                meta = (meta["swizzle"], meta["elem_size"], meta["elem_type"],
                        tuple(meta["block_size"]), meta["fp4_padded"], meta)
            layouts.append(meta)
        descriptors = tuple(zip(indices, layouts))[::-1]
        c_launch = cells["launcher"]
    if type(c_launch).__name__ != "builtin_function_or_method":
        return None
    return c_launch, run.launch_cooperative_grid, run.launch_pdl, descriptors


def _descriptor_args(desc: TensorDescriptor, layout) -> list:
    """``make_tensordesc_arg(desc, meta)``: the kernel arguments a descriptor expands to,
    its CUtensorMap cached (above)."""
    if layout is None:  # lowered without a CUtensorMap: the pointer, shape and strides
        return _make_tensordesc_arg(desc, None)
    key = (desc.base.data_ptr(), tuple(desc.shape), tuple(desc.strides), desc.padding,
           layout[:5])
    expanded = _descriptor_maps.get(key)
    if expanded is None:
        if len(_descriptor_maps) >= _DESCRIPTOR_MAPS_MAX:
            _descriptor_maps.clear()
        expanded = _descriptor_maps[key] = _make_tensordesc_arg(desc, layout[5])
    return expanded


def _make_tensordesc_arg(desc, meta):
    from triton.backends.nvidia.driver import make_tensordesc_arg
    return make_tensordesc_arg(desc, meta)


def _compile_knobs() -> tuple:
    """The Triton settings that JITFunction.run and the backend's options take from its
    knobs as of this launch: debug (TRITON_DEBUG, or ``knobs.runtime.debug``), the
    instrumentation mode, fp fusion (TRITON_DEFAULT_FP_FUSION), an overridden arch
    (~0.43 us on the CPU machine, Triton 3.7, timeit: each knob reads its environment
    variable unless set in Python)."""
    runtime = _knobs.runtime
    return (runtime.debug, getattr(_knobs.compilation, "instrumentation_mode", None),
            getattr(_LANGUAGE_KNOBS, "default_fp_fusion", None),
            getattr(runtime, "override_arch", None))


def _hooked() -> bool:
    """A launch hook is set (a profiler's), or a stages-inspection hook (which changes
    how Triton compiles). Triton 3.5+ keeps launch hooks in a ``HookChain`` (never None:
    its ``calls`` may be empty), 3.4 in a plain attribute; older Tritons have no
    ``knobs`` (their hooks sit elsewhere): they always launch through ``kernel[grid]``."""
    if _knobs is None:
        return True
    runtime = _knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(getattr(enter, "calls", enter) or getattr(leave, "calls", leave)
                or getattr(runtime, "add_stages_inspection_hook", None) is not None)
