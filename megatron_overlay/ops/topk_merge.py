"""Merging top-k candidate lists: tiles of one shard, vocab splits of a kernel, TP shards.

The order everywhere: descending value, ties to the lower vocab id. Candidate lists may
be padded (fewer than k columns in a shard): padding carries ``PAD_ID`` and value -inf,
so it sorts after every real candidate.
"""

from __future__ import annotations

import torch

PAD_ID = torch.iinfo(torch.int64).max


def _sort_key(values: torch.Tensor) -> torch.Tensor:
    """The values as they rank: NaN as -inf (as the Triton merges' keys), +-inf kept
    (``nan_to_num``'s defaults would make -inf the least finite float, above a NaN: a
    padded place then ranked above a NaN row's real candidates)."""
    return torch.nan_to_num(values, nan=float("-inf"), posinf=float("inf"),
                            neginf=float("-inf"))


def order_candidates(values: torch.Tensor, ids: torch.Tensor, k: int):
    """The best ``k`` of each row's candidates, [n, c] -> [n, k], in the order above.

    Two stable sorts: by id, then by value (descending); equal values keep the id order.
    NaN values (a row poisoned by an invalid temperature) sort last and stay NaN.
    """
    by_id = ids.argsort(dim=1, stable=True)
    values, ids = values.gather(1, by_id), ids.gather(1, by_id)
    key = _sort_key(values)
    by_value = key.argsort(dim=1, descending=True, stable=True)[:, :k]
    return values.gather(1, by_value), ids.gather(1, by_value)


def chosen_columns(chosen: torch.Tensor, kk: int, sync_free: bool) -> torch.Tensor:
    """The ascending column indices [n, kk] of a bool [n, w] with kk True a row.
    ``sync_free`` (CUDA): a stable sort of not-chosen, which puts the chosen first in
    column order, instead of ``nonzero`` (a host sync: its size is data-dependent; on the
    CPU, where no sync exists, it is the cheaper one)."""
    if sync_free:
        return (~chosen).to(torch.int8).argsort(dim=1, stable=True)[:, :kk]
    return chosen.nonzero()[:, 1].view(chosen.shape[0], kk)


def tile_topk(z: torch.Tensor, k: int, id_offset: int):
    """Exact top-``k`` of a [n, w] logits tile with ties to the lower column: (values
    [n, min(k, w)], ids + id_offset), in the order above. ``torch.topk`` alone picks
    arbitrarily among equal values at the k-th place; the ties are settled here."""
    n, width = z.shape
    kk = min(k, width)
    key = _sort_key(z)
    kth = key.topk(kk, dim=1).values[:, -1:]
    above = key > kth
    tied = key == kth
    # of the columns equal to the k-th value, the lowest ones fill the remaining places
    room = kk - above.sum(dim=1, keepdim=True)
    chosen = above | (tied & (tied.cumsum(dim=1) <= room))
    cols = chosen_columns(chosen, kk, sync_free=z.is_cuda)
    values = z.gather(1, cols)
    by_value = _sort_key(values).argsort(dim=1, descending=True, stable=True)
    return values.gather(1, by_value), cols.gather(1, by_value) + id_offset


def pad_candidates(values: torch.Tensor, ids: torch.Tensor, k: int):
    """Pad [n, c < k] candidates to [n, k] with (-inf, PAD_ID)."""
    missing = k - values.shape[1]
    if missing <= 0:
        return values, ids
    n = values.shape[0]
    return (torch.cat([values, values.new_full((n, missing), float("-inf"))], dim=1),
            torch.cat([ids, ids.new_full((n, missing), PAD_ID)], dim=1))
