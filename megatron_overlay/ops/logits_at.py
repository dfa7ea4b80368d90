"""Logits at a few given vocab ids per token, and their gradient: sparse, plain torch.

For K ids per token this is N x K dot products of length H (forward) and as many rank-1
updates (backward): K / V of a logits GEMM, so plain torch on any device is enough.
Token chunks bound the gathered weight rows to ``GATHER_BUDGET_BYTES``.

  logits_at(hidden [N,H], weight [V,H], local_ids [N,K] (index into this vocab shard, or
      -1 where the id lives in another shard), inv_temperature (float or fp32 [N])) ->
      z [N, K] fp32 = (hidden @ weight.T)[n, id] * inv_t[n], and 0 where the id is -1
  add_logits_at_grad(hidden, weight, local_ids, inv_temperature, grad_z [N,K] fp32,
      d_hidden [N,H] fp32, d_weight [V,H] fp32 or None) -> adds d(sum grad_z * z) to both
      in place. d_weight must be fp32 (the caller rounds once afterwards): adding fp32
      updates to a 16-bit d_weight would round touched rows twice, and accumulating only
      the touched rows in fp32 needs their unique ids, a host sync on CUDA.
"""

from __future__ import annotations

import torch

from .torch_chunked import row_slice

GATHER_BUDGET_BYTES = 32 << 20


def _token_chunk(n_ids: int, hidden_size: int) -> int:
    return max(1, GATHER_BUDGET_BYTES // max(1, n_ids * hidden_size * 4))


def logits_at(hidden: torch.Tensor, weight: torch.Tensor, local_ids: torch.Tensor,
              inv_temperature) -> torch.Tensor:
    n, k = local_ids.shape
    out = torch.zeros(n, k, dtype=torch.float32, device=hidden.device)
    if n == 0 or k == 0:
        return out
    here = local_ids >= 0
    safe = torch.where(here, local_ids, torch.zeros_like(local_ids))
    step = _token_chunk(k, hidden.shape[1])
    for n0 in range(0, n, step):
        rows = slice(n0, n0 + step)
        w = weight[safe[rows]].float()                       # [c, K, H]
        z = torch.bmm(w, hidden[rows].float().unsqueeze(2)).squeeze(2)
        z = z * row_slice(inv_temperature, rows)
        out[rows] = torch.where(here[rows], z, torch.zeros_like(z))
    return out


def add_logits_at_grad(hidden: torch.Tensor, weight: torch.Tensor, local_ids: torch.Tensor,
                       inv_temperature, grad_z: torch.Tensor, d_hidden: torch.Tensor,
                       d_weight: torch.Tensor | None) -> None:
    n, k = local_ids.shape
    if d_weight is not None and d_weight.dtype != torch.float32:
        raise TypeError(f"d_weight must be float32 (got {d_weight.dtype}); round it after")
    if n == 0 or k == 0:
        return
    here = local_ids >= 0
    safe = torch.where(here, local_ids, torch.zeros_like(local_ids))
    step = _token_chunk(k, hidden.shape[1])
    for n0 in range(0, n, step):
        rows = slice(n0, n0 + step)
        # dz/dlogit = inv_t; ids in other shards contribute nothing here
        g = torch.where(here[rows], grad_z[rows].float(), torch.zeros_like(grad_z[rows]))
        g = g * row_slice(inv_temperature, rows)                 # [c, K]
        w = weight[safe[rows]].float()                           # [c, K, H]
        d_hidden[rows] += torch.bmm(g.unsqueeze(1), w).squeeze(1)
        if d_weight is not None:
            h = hidden[rows].float()
            updates = (g.unsqueeze(2) * h.unsqueeze(1)).reshape(-1, h.shape[1])
            d_weight.index_add_(0, safe[rows].reshape(-1), updates)
