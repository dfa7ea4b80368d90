"""Backward, between stage 1 and the GEMMs: add a few given entries to a d(logits) chunk.

For ops whose loss has log-probs at several ids per token (linear_logprobs_at,
linear_topk_logprobs), d(loss)/dz_j carries ``sum_i g_i 1[j = id_i]`` besides the dense
``-p_j sum_i g_i``. Stage 1 writes the dense part (no label); this kernel adds the sparse
part into the same [rows, vocab-chunk] buffer, so the two cuBLAS GEMMs produce d_hidden
and d_weight at once (no [V, H] fp32 buffer, no scatter over [N*K, H]).

One program per token row: it loads the row's K (id, value) pairs, sums the values of
repeated ids (e.g. a label that is also a top-k id) onto their first occurrence, and adds
each sum to the buffer entry in fp32, rounding once to the buffer's dtype.
"""

import torch
import triton
import triton.language as tl

from .launch import launch, next_power_of_2


@triton.jit
def add_sparse_grad_kernel(g_ptr, stride_g, ids_ptr, vals_ptr, stride_vr, stride_vk,
                           inv_t_ptr, scale_ptr, K, v0, width, inv_t, KP: tl.constexpr,
                           ROW_INV_T: tl.constexpr, HAS_SCALE: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, KP)
    valid = i < K
    base = row.to(tl.int64) * K
    ids = tl.load(ids_ptr + base + i, mask=valid, other=-1).to(tl.int64)
    if ROW_INV_T:
        inv_t = tl.load(inv_t_ptr + row)
    # each entry's d(logits) term, g * inv_t (* the fp16 buffer's scale), before the sums
    vals = tl.load(vals_ptr + row.to(tl.int64) * stride_vr + i * stride_vk, mask=valid,
                   other=0.0) * inv_t
    if HAS_SCALE:
        vals = vals * tl.load(scale_ptr)
    cols = ids - v0
    here = valid & (ids >= 0) & (cols >= 0) & (cols < width)
    same = (ids[:, None] == ids[None, :]) & here[:, None] & here[None, :]
    total = tl.sum(tl.where(same, vals[None, :], 0.0), axis=1)
    earlier = tl.sum((same & (i[None, :] < i[:, None])).to(tl.int32), axis=1)
    write = here & (earlier == 0)
    ptrs = g_ptr + row.to(tl.int64) * stride_g + cols
    old = tl.load(ptrs, mask=write, other=0.0).to(tl.float32)
    tl.store(ptrs, (old + total).to(g_ptr.dtype.element_ty), mask=write)


def add_sparse_grad(grad: torch.Tensor, ids: torch.Tensor, vals: torch.Tensor, v0: int,
                    width: int, inv_t: float = 1.0, inv_t_rows: torch.Tensor | None = None,
                    scale: torch.Tensor | None = None) -> None:
    """grad [rows, width] (columns v0 ...) += the rows' (ids [rows, K] int64 or int32,
    contiguous; vals [rows, K] fp32 at any strides: a loss's sum() hands its one value
    expanded) entries that fall in it, each times the row's inverse temperature
    (``inv_t_rows`` [rows] fp32, else ``inv_t``) and ``scale`` (a 1-element fp32 tensor:
    the fp16 buffer's, logprob_backward.py) when given."""
    k = ids.shape[1]
    launch(add_sparse_grad_kernel, (grad.shape[0],),
        grad, grad.stride(0), ids, vals, vals.stride(0), vals.stride(1),
        vals if inv_t_rows is None else inv_t_rows,
        vals if scale is None else scale, k, v0, width, inv_t, KP=next_power_of_2(k),
        ROW_INV_T=inv_t_rows is not None, HAS_SCALE=scale is not None)
