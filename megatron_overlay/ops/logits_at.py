"""Logits at a few given vocab ids per token: sparse, plain torch.

For K ids per token this is N x K dot products of length H, K / V of a logits GEMM, so
plain torch on any device is enough. Token chunks bound the gathered weight rows to
``GATHER_BUDGET_BYTES``. (Their gradient is the log-prob backward stage's ``sparse_ids``
term, folded into its d(logits) chunks.)

  logits_at(hidden [N,H], weight [V,H], local_ids [N,K] (index into this vocab shard, or
      -1 where the id lives in another shard), inv_temperature (float or fp32 [N])) ->
      z [N, K] fp32 = (hidden @ weight.T)[n, id] * inv_t[n], and 0 where the id is -1
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

