"""The chunked torch implementation of the top-k forward stage (CPU, and the reference).

The top-k stage of ops/stages.py (``TopkStage``: the contract), shared with the Triton
kernel (ops/kernels/topk_forward.py). Here the statistics come from
torch_chunked.forward_stats on the same token chunk (its math, not a copy of it; one
extra matmul per chunk on this reference path). The Triton kernel feeds each logits tile
to both in one pass.
"""

from __future__ import annotations

import torch

from . import batch_invariance, torch_chunked
from .params import FinalizeRequest
from .topk_merge import order_candidates, pad_candidates, tile_topk
from .torch_chunked import TOKEN_CHUNK, VOCAB_CHUNK, forward_stats, rounded, row_slice


def topk_stats(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor | None,
               inv_temperature, with_entropy: bool, k: int, *,
               logits_dtype: torch.dtype | None = None, merged: bool = True,
               finalize: FinalizeRequest | None = None,
               token_chunk: int = TOKEN_CHUNK, vocab_chunk: int = VOCAB_CHUNK):
    n_tokens, vocab = hidden.shape[0], weight.shape[0]
    values = torch.full((n_tokens, k), float("-inf"), dtype=torch.float32, device=hidden.device)
    ids = torch.full((n_tokens, k), -1, dtype=torch.int64, device=hidden.device)
    stats = torch.empty(n_tokens, 4, dtype=torch.float32, device=hidden.device)
    # Batch invariance (ops/batch_invariance.py): every GEMM has exactly token_chunk rows
    pad = batch_invariance.enabled()
    for n0 in range(0, n_tokens, token_chunk):
        rows = slice(n0, n0 + token_chunk)
        h = hidden[rows]
        inv_t = row_slice(inv_temperature, rows)
        real = h.shape[0]
        h_padded = h.float()
        if pad and real < token_chunk:
            h_padded = torch.cat([h_padded, h_padded.new_zeros(token_chunk - real, h.shape[1])])
        best_v = best_i = None
        for v0 in range(0, vocab, vocab_chunk):
            w = weight[v0:v0 + vocab_chunk]
            z = rounded((h_padded @ w.float().T)[:real], logits_dtype).mul_(inv_t)
            tile_v, tile_i = tile_topk(z, k, v0)
            if best_v is None:
                best_v, best_i = tile_v, tile_i
            else:
                best_v, best_i = order_candidates(torch.cat([best_v, tile_v], dim=1),
                                                  torch.cat([best_i, tile_i], dim=1), k)
        if best_v is not None:
            best_v, best_i = pad_candidates(best_v, best_i, k)
            values[rows], ids[rows] = best_v, best_i
        chunk_inv_t = inv_t if not isinstance(inv_t, torch.Tensor) else inv_t[:, 0]
        labels = None if local_labels is None else local_labels[rows]
        stats[rows] = forward_stats(h, weight, labels, chunk_inv_t, with_entropy,
                                    logits_dtype=logits_dtype, token_chunk=token_chunk,
                                    vocab_chunk=vocab_chunk)
    if finalize is not None:  # the contract's finalize, the values made log-probs
        return torch_chunked.finalize(stats[None], *finalize[:3], with_entropy,
                                      record_alloc=finalize.record_alloc,
                                      values=values), values, ids
    return (stats if merged else stats[None]), values, ids
