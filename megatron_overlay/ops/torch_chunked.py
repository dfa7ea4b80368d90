"""The chunked torch implementation of the fused log-prob/entropy stages (CPU, reference).

Tokens x vocab tiles, fp32 accumulation, online log-sum-exp: memory O(N + TOKEN_CHUNK x
VOCAB_CHUNK), never O(N x V). Backward recomputes each tile's logits.

The log-prob stages of ops/stages.py (``LogprobStages``: the contract): forward_stats,
finalize, backward, check_ids, logits_at (sparse: token chunks bound the gathered weight
rows to GATHER_BUDGET_BYTES), logits_at_ids (the two) and inverse_temperature_rows
(ops/temperature.py's torch form). ``token_chunk`` / ``vocab_chunk``: tile sizes, for tests.
"""

from __future__ import annotations

import torch

from . import batch_invariance, label_check, row_flags
from .temperature import inverse_rows as inverse_temperature_rows  # noqa: F401  (the stage)


def row_slice(inv_temperature, rows: slice):
    """A token chunk's inverse temperature: the float, or that chunk's [n, 1] column."""
    if isinstance(inv_temperature, torch.Tensor):
        return inv_temperature[rows, None]
    return inv_temperature


def rounded(logits: torch.Tensor, logits_dtype) -> torch.Tensor:
    """fp32 logits as a head in ``logits_dtype`` gives them (rounded once), or as they are."""
    return logits if logits_dtype is None else logits.to(logits_dtype).float()


# A tile of TOKEN_CHUNK x VOCAB_CHUNK fp32 logits is 16 MiB: big enough for an efficient
# CPU matmul, small enough that peak memory does not grow with N or V.
TOKEN_CHUNK = 1024
VOCAB_CHUNK = 4096
# logits_at: K ids per token are N x K dot products of length H, K / V of a logits GEMM,
# so plain torch on any device is enough; token chunks bound the gathered weight rows.
GATHER_BUDGET_BYTES = 32 << 20


def forward_stats(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor | None,
                  inv_temperature, with_entropy: bool, *, logits_dtype: torch.dtype | None = None,
                  merged: bool = True, token_chunk: int = TOKEN_CHUNK,
                  vocab_chunk: int = VOCAB_CHUNK) -> torch.Tensor:
    """[N, 4], or [1, N, 4] with ``merged=False`` (one part: this path merges as it goes)."""
    n_tokens, vocab = hidden.shape[0], weight.shape[0]
    if local_labels is None:
        local_labels = torch.full((n_tokens,), -1, dtype=torch.int64, device=hidden.device)
    stats = torch.zeros(n_tokens, 4, dtype=torch.float32, device=hidden.device)
    stats[:, 0] = float("-inf")
    # Batch invariance (ops/batch_invariance.py): every tile has exactly token_chunk rows
    pad = batch_invariance.enabled()
    for n0 in range(0, n_tokens, token_chunk):
        h = hidden[n0:n0 + token_chunk].float()
        labels = local_labels[n0:n0 + token_chunk]
        inv_t = row_slice(inv_temperature, slice(n0, n0 + token_chunk))
        rows = h.shape[0]
        if pad and rows < token_chunk:
            h = torch.cat([h, h.new_zeros(token_chunk - rows, h.shape[1])])
            labels = torch.cat([labels, labels.new_full((token_chunk - rows,), -1)])
            if isinstance(inv_t, torch.Tensor):
                inv_t = torch.cat([inv_t, inv_t.new_ones(token_chunk - rows, 1)])
        tile_stats = stats[n0:n0 + rows] if h.shape[0] == rows else \
            torch.cat([stats[n0:n0 + rows], stats.new_zeros(token_chunk - rows, 4)])
        row_max, sum_exp, sum_exp_z, z_label = tile_stats.unbind(1)
        for v0 in range(0, vocab, vocab_chunk):
            z = rounded(h @ weight[v0:v0 + vocab_chunk].float().T, logits_dtype)
            z.mul_(inv_t)
            in_tile = (labels >= v0) & (labels < v0 + z.shape[1])
            picked = z.gather(1, (labels - v0).clamp(0, z.shape[1] - 1)[:, None]).squeeze(1)
            z_label.add_(torch.where(in_tile, picked, torch.zeros_like(picked)))
            new_max = torch.maximum(row_max, z.max(dim=1).values)
            rescale = torch.exp(row_max - new_max)
            shifted = z.sub_(new_max[:, None])  # in place: two tiles alive at most
            e = torch.exp(shifted)
            if with_entropy:
                # t' = r (t + s (m - m')): moving the reference point from m to m'
                moved = torch.where(sum_exp > 0, sum_exp * (row_max - new_max),
                                    torch.zeros_like(sum_exp))
                tile_t = torch.bmm(e.unsqueeze(1), shifted.unsqueeze(2)).view(-1)
                sum_exp_z.add_(moved).mul_(rescale).add_(tile_t)
            sum_exp.mul_(rescale).add_(e.sum(dim=1))
            row_max.copy_(new_max)
        if tile_stats.shape[0] != rows:
            stats[n0:n0 + rows] = tile_stats[:rows]
    return stats if merged else stats[None]


def finalize(stats: torch.Tensor, labels: torch.Tensor | None, vocab_size: int,
             ignore_index: int, with_entropy: bool, *, record_alloc=None, values=None,
             nan_rows=None):
    """(lse, mean_z, entropy, log_probs, valid, bad, record) from [S, N, 4] shards'
    statistics in rank order, and ``values`` made log-probs in place; see ops/stages.py."""
    shard_max, sum_exp, sum_exp_shifted, z_label = stats.unbind(2)  # each [S, N]
    row_max = shard_max.max(dim=0).values
    if stats.shape[0] > 1:
        weights = batch_invariance.per_element(torch.exp, shard_max - row_max)
        # each shard's t is relative to its own max: move it to the global one
        moved = sum_exp_shifted + sum_exp * (shard_max - row_max)
        # sums in rank order (a reduction kernel's order may depend on N: batch invariance)
        terms = (sum_exp * weights, moved * weights, z_label)
        sum_exp, sum_exp_shifted, z_label = (t[0].clone() for t in terms)
        for rank in range(1, stats.shape[0]):
            for total, t in zip((sum_exp, sum_exp_shifted, z_label), terms):
                total.add_(t[rank])
    else:
        sum_exp, sum_exp_shifted, z_label = sum_exp[0], sum_exp_shifted[0], z_label[0]
    log_sum_exp = batch_invariance.per_element(torch.log, sum_exp)
    lse = row_max + log_sum_exp
    mean_z = entropy = log_probs = valid = bad = rec = None
    if with_entropy:
        mean_shifted = sum_exp_shifted / sum_exp  # E[z] - max z
        mean_z, entropy = row_max + mean_shifted, log_sum_exp - mean_shifted
    if labels is not None:
        valid = labels != ignore_index
        bad = valid & label_check.bad_ids(labels, vocab_size)  # label_check.bad_labels
        log_probs = torch.where(valid, z_label - lse, 0.0)
        log_probs = torch.where(bad, float("nan"), log_probs)
        if with_entropy:
            entropy = torch.where(valid, entropy, 0.0)
        rec = _record_into(label_check.record(bad, labels), record_alloc)
    log_probs_at(values, lse, nan_rows)
    return lse, mean_z, entropy, log_probs, valid, bad, rec


def log_probs_at(values: torch.Tensor | None, lse: torch.Tensor,
                 nan_rows: torch.Tensor | None) -> None:
    """finalize's ``values`` (z at k ids a row) -> their log-probs, in place."""
    if values is not None:
        values.sub_(lse[:, None])
        if nan_rows is not None:
            values.masked_fill_(nan_rows[:, None], float("nan"))


def _record_into(rec: torch.Tensor, record_alloc) -> torch.Tensor:
    """The record, copied (asynchronously) to ``record_alloc``'s buffer where given."""
    if record_alloc is None:
        return rec
    return record_alloc(rec.shape[0], rec.device).copy_(rec, non_blocking=True)


def backward(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor | None,
             inv_temperature, lse: torch.Tensor, mean_z: torch.Tensor | None,
             grad_logprob: torch.Tensor, grad_entropy: torch.Tensor | None, *,
             d_weight_dtype: torch.dtype | None = None,
             d_hidden_dtype: torch.dtype | None = None,
             sparse_ids: torch.Tensor | None = None, sparse_grads: torch.Tensor | None = None,
             logits_dtype: torch.dtype | None = None,
             need_d_hidden: bool = True, need_d_weight: bool = True,
             valid: torch.Tensor | None = None, bad: torch.Tensor | None = None,
             token_chunk: int = TOKEN_CHUNK, vocab_chunk: int = VOCAB_CHUNK):
    """d/dz log p[y] = 1[j=y] - p_j;  d/dz H = -p_j (z_j - E_p[z]);  dz/d(logit) = 1/T.
    With ``logits_dtype`` p comes from the rounded logits, as the forward's, and the
    rounding passes the gradient through unchanged (as autograd through a cast does)."""
    n_tokens, vocab = hidden.shape[0], weight.shape[0]
    grad_logprob, grad_entropy = row_flags.masked_row_grads(grad_logprob, grad_entropy,
                                                              valid, bad)
    if local_labels is None:
        local_labels = torch.full((n_tokens,), -1, dtype=torch.int64, device=hidden.device)
    d_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) \
        if need_d_hidden else None
    d_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
        if need_d_weight else None
    if d_hidden is None and d_weight is None:
        return None, None
    for n0 in range(0, n_tokens, token_chunk):
        sl = slice(n0, n0 + token_chunk)
        h = hidden[sl].float()
        labels, g_lp, row_lse = local_labels[sl], grad_logprob[sl], lse[sl]
        inv_t = row_slice(inv_temperature, sl)
        for v0 in range(0, vocab, vocab_chunk):
            w = weight[v0:v0 + vocab_chunk].float()
            z = rounded(h @ w.T, logits_dtype) * inv_t
            p = torch.exp(z - row_lse[:, None])
            grad_z = -p * g_lp[:, None]
            if grad_entropy is not None:
                grad_z -= grad_entropy[sl, None] * p * (z - mean_z[sl, None])
            in_tile = (labels >= v0) & (labels < v0 + z.shape[1])
            cols = (labels - v0).clamp(0, z.shape[1] - 1)[:, None]  # no nonzero(): no sync
            grad_z.scatter_add_(1, cols, torch.where(in_tile, g_lp, 0.0)[:, None])
            if sparse_ids is not None:
                ids = sparse_ids[sl]
                here = (ids >= v0) & (ids < v0 + z.shape[1])
                grad_z.scatter_add_(1, (ids - v0).clamp(0, z.shape[1] - 1),
                                    torch.where(here, sparse_grads[sl].float(), 0.0))
            grad_z *= inv_t
            if d_hidden is not None:
                d_hidden[sl] += grad_z @ w
            if d_weight is not None:
                d_weight[v0:v0 + vocab_chunk] += grad_z.T @ h
    return (None if d_hidden is None else d_hidden.to(d_hidden_dtype or torch.float32),
            None if d_weight is None else d_weight.to(d_weight_dtype or torch.float32))


def check_ids(ids: torch.Tensor, vocab_start: int, local_vocab: int, vocab_size: int, *,
              record_alloc=None):
    """(local_ids, bad_rows, record) of global ids [N, K]; see ops/stages.py."""
    bad = label_check.bad_ids(ids, vocab_size)
    local = ids.to(torch.int64) - vocab_start
    local = torch.where(bad | (local < 0) | (local >= local_vocab), -1, local)
    return local, bad.any(dim=1), _record_into(label_check.record(bad, ids), record_alloc)


def logits_at(hidden: torch.Tensor, weight: torch.Tensor, local_ids: torch.Tensor,
              inv_temperature, *, logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    n, k = local_ids.shape
    out = torch.zeros(n, k, dtype=torch.float32, device=hidden.device)
    if n == 0 or k == 0:
        return out
    here = local_ids >= 0
    safe = torch.where(here, local_ids, torch.zeros_like(local_ids))
    step = max(1, GATHER_BUDGET_BYTES // max(1, k * hidden.shape[1] * 4))
    for n0 in range(0, n, step):
        rows = slice(n0, n0 + step)
        w = weight[safe[rows]].float()                       # [c, K, H]
        z = rounded(torch.bmm(w, hidden[rows].float().unsqueeze(2)).squeeze(2), logits_dtype)
        z = z * row_slice(inv_temperature, rows)
        out[rows] = torch.where(here[rows], z, torch.zeros_like(z))
    return out


def logits_at_ids(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor,
                  vocab_start: int, local_vocab: int, vocab_size: int, inv_temperature, *,
                  logits_dtype: torch.dtype | None = None, record_alloc=None):
    """check_ids, then logits_at at its local ids; see ops/stages.py. The record goes to
    ``record_alloc``'s buffer last, so that nothing can fail between its lending and the
    op's queueing it (ops/label_check.py)."""
    local, bad_rows, record = check_ids(ids, vocab_start, local_vocab, vocab_size)
    z = logits_at(hidden, weight, local, inv_temperature, logits_dtype=logits_dtype)
    return z, local, bad_rows, _record_into(record, record_alloc)
