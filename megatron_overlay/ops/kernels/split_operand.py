"""Mixed operands, stage 0: an fp32 operand as hi + lo in the other operand's 16-bit dtype.

The tensor cores multiply 16-bit tiles; an fp32 operand x (an fp32 residual stream, or an
fp32 head weight beside bf16 hidden states) is written as hi = round(x) and
lo = round(x - hi) (x - hi is exact in fp32), and every product x @ y becomes lo @ y +
hi @ y: two MMAs over the same tiles of y, accumulated in fp32 (``_tiles.mma_step``).
bf16 halves keep 16 of fp32's 24 significant bits (a relative residual under 2^-16; on
the benchmark shapes the log-probs stay within 3e-5 of fp64, docs/BENCHMARKS.md); fp16
halves 22 bits within fp16's exponent range.

The split is made a block at a time, into a buffer of at most SPLIT_BUDGET_BYTES: a token
block of fp32 hidden states, or a vocab chunk of an fp32 weight; never a whole converted
copy of the [V, H] weight. One pass reads x once and writes both halves (8 bytes an
element: ~1.2 ms for a 151936 x 4096 weight on an H200, against its 2 x 13 ms of MMAs).
The kernel also runs under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._tiles import split_hi_lo
from .launch import cdiv, launch

# The halves of one token block or vocab chunk (2 x 2 bytes an element): 16384 rows at H = 4096.
SPLIT_BUDGET_BYTES = 256 << 20
SPLIT_BLOCK = 2048  # elements per program


@triton.jit
def split_kernel(x_ptr, hi_ptr, lo_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < numel
    x = tl.load(x_ptr + offs, mask=keep, other=0.0)
    hi, lo = split_hi_lo(x, hi_ptr.dtype.element_ty)
    tl.store(hi_ptr + offs, hi, mask=keep)
    tl.store(lo_ptr + offs, lo, mask=keep)


def split_rows(n_rows: int, width: int, multiple: int) -> int:
    """Rows of ``width`` elements whose halves fit SPLIT_BUDGET_BYTES, a multiple of
    ``multiple`` (a tile's rows), at least one tile."""
    rows = SPLIT_BUDGET_BYTES // (4 * max(width, 1)) // multiple * multiple
    return min(max(rows, multiple), n_rows)


def split_hi_lo_into(x: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) of fp32 ``x`` [R, C] in ``out``'s 16-bit dtype, written into ``out``
    ([2, >= R, C], contiguous): hi = out[0, :R], lo = out[1, :R]."""
    rows = x.shape[0]
    hi, lo = out[0, :rows], out[1, :rows]
    x = x.contiguous()
    if x.numel():
        launch(split_kernel, (cdiv(x.numel(), SPLIT_BLOCK),), x, hi, lo, x.numel(),
               BLOCK=SPLIT_BLOCK)
    return hi, lo
