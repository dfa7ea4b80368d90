"""Per-row temperatures -> the stages' inverse temperatures, in one launch.

The stage contract's ``inverse_temperature_rows`` (ops/stages.py; what ops/temperature.py
asks of the stage for a tensor of temperatures): fp32 1 / T a row, NaN where T (in fp32)
lies outside [MIN_TEMPERATURE, MAX_TEMPERATURE] or is NaN. The torch stage's conversion
is four to five element-wise launches on CUDA (cast, clamp, compare, reciprocal, select);
its form of pass 15, as many, took ~97 us of a 256-token forward call's host time on an
H100's host (docs/BENCHMARKS.md, pass 15), where one launch takes ~30-45. ``div_rn`` rounds 1 / T correctly, as torch's reciprocal
does on CUDA, so both stages give the same bits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..temperature import MAX_TEMPERATURE, MIN_TEMPERATURE  # a leaf module
from .launch import cdiv, launch

INV_T_BLOCK = 1024
# what the kernel loads and casts itself (Triton's casts round as torch's)
_LOADED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


@triton.jit
def inverse_temperature_kernel(t_ptr, out_ptr, n, stride, min_t, max_t, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = rows < n
    t = tl.load(t_ptr + rows.to(tl.int64) * stride, mask=keep, other=1.0).to(tl.float32)
    ok = (t >= min_t) & (t <= max_t)  # NaN compares false
    inv = tl.div_rn(tl.full([BLOCK], 1.0, tl.float32), t)
    tl.store(out_ptr + rows, tl.where(ok, inv, float("nan")), mask=keep)


def inverse_temperature_rows(temperature: torch.Tensor) -> torch.Tensor:
    """The contract's: ``temperature`` [N] floating (any stride) -> fp32 [N]."""
    if temperature.dtype not in _LOADED_DTYPES:  # fp8 and the like: cast by torch first
        temperature = temperature.float()  # (exact, as the torch stage's own cast)
    n = temperature.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=temperature.device)
    if n:
        launch(inverse_temperature_kernel, (cdiv(n, INV_T_BLOCK),), temperature, out, n,
               temperature.stride(0), MIN_TEMPERATURE, MAX_TEMPERATURE, BLOCK=INV_T_BLOCK)
    return out
