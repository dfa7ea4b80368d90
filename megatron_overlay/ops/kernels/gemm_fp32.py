"""Backward, stage 2: cuBLAS GEMMs of a d(logits) chunk with fp32 outputs (no Triton).

``torch.mm(a, b, out_dtype=torch.float32)`` (and the ``addmm`` form) multiply 16-bit
operands with fp32 accumulation *and* an fp32 result: no 16-bit rounding of the chunk's
product before it is added to the fp32 accumulator. Torch releases without the argument,
and backends without the kernel (CPU), refuse it; then one 16-bit rounding per chunk's
product is the fallback.
"""

from __future__ import annotations

import functools

import torch

FORMS = ("mm", "addmm")


@functools.cache
def out_dtype_supported(form: str, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``torch.<form>(..., out_dtype=torch.float32, out=...)`` runs for ``dtype``
    operands on ``device``: tried once on 2 x 2 tensors there, and remembered.

    A refusal (TypeError: a torch without the argument; RuntimeError, NotImplementedError
    among them: no such kernel for this backend or dtype) answers False. An out-of-memory
    error answers nothing: it propagates, and functools.cache keeps no result for a call that
    raised, so the next call tries again (a first use that met a full GPU must not turn
    the fp32-output path off for the rest of the process).
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    a = torch.zeros(2, 2, dtype=dtype, device=device)
    out = torch.zeros(2, 2, dtype=torch.float32, device=device)
    try:
        if form == "addmm":
            torch.addmm(out, a, a, out_dtype=torch.float32, out=out)
        else:
            torch.mm(a, a, out_dtype=torch.float32, out=out)
    except torch.cuda.OutOfMemoryError:
        raise
    except (RuntimeError, TypeError):
        return False
    return True


def matmul_fp32(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
    """out (fp32) = a @ b, or out += a @ b, with fp32 accumulation throughout."""
    if a.is_cuda and a.dtype != torch.float32:
        if accumulate and out_dtype_supported("addmm", a.dtype, a.device):
            torch.addmm(out, a, b, out_dtype=torch.float32, out=out)
            return
        if out_dtype_supported("mm", a.dtype, a.device):
            if accumulate:
                out += torch.mm(a, b, out_dtype=torch.float32)
            else:
                torch.mm(a, b, out_dtype=torch.float32, out=out)
            return
        product = torch.mm(a, b).float()  # one 16-bit rounding of each chunk's product
    elif a.is_cuda:
        product = torch.mm(a, b)
    else:  # the interpreter's CPU tensors
        product = a.float() @ b.float()
    if accumulate:
        out += product
    else:
        out.copy_(product)
