"""Vocab-parallel TP helpers of the fused ops: this rank's shard of the ids, and the
merge of every shard's per-token statistics.

``weight`` is this rank's vocab shard [V_local, H]; shards in rank order; ids are global.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import batch_invariance


def shard_ids(ids: torch.Tensor, vocab_start: int, local_vocab: int) -> torch.Tensor:
    """Global ids -> indices into this vocab shard, -1 where an id lives elsewhere."""
    local = ids - vocab_start
    return torch.where((local >= 0) & (local < local_vocab), local, torch.full_like(local, -1))


def shard_layout(weight: torch.Tensor, tp_group) -> tuple[bool, int, int]:
    """(tensor-parallel?, first global id of this rank's shard, number of shards); shards
    in rank order."""
    world = dist.get_world_size(tp_group) if tp_group is not None else 1
    if world == 1:
        return False, 0, 1
    return True, dist.get_rank(tp_group) * weight.shape[0], world


def shard_labels(labels: torch.Tensor, vocab_start: int, local_vocab: int,
                 ignore_index: int) -> torch.Tensor:
    """Index into this shard, or -1 where the label lives elsewhere or is ignored."""
    local = labels - vocab_start if vocab_start else labels
    inside = (local >= 0) & (local < local_vocab) & (labels != ignore_index)
    return torch.where(inside, local, -1)


def merge_stats(stats: torch.Tensor, tp_group) -> torch.Tensor:
    """Combine per-shard [N, 4] statistics into global ones with a single collective."""
    world = dist.get_world_size(tp_group)
    flat = torch.empty((world * stats.shape[0], stats.shape[1]), dtype=stats.dtype,
                       device=stats.device)
    dist.all_gather_into_tensor(flat, stats.contiguous(), group=tp_group)
    gathered = flat.view(world, *stats.shape)
    shard_max, sum_exp, sum_exp_shifted, z_label = gathered.unbind(2)  # each [world, N]
    row_max = shard_max.max(dim=0).values
    weights = batch_invariance.per_element(torch.exp, shard_max - row_max)
    # each shard's t is relative to its own max: move it to the global one
    moved = sum_exp_shifted + sum_exp * (shard_max - row_max)
    # sums in rank order (a reduction kernel's order may depend on N: batch invariance)
    terms = (sum_exp * weights, moved * weights, z_label)
    totals = [t[0].clone() for t in terms]
    for rank in range(1, world):
        for total, t in zip(totals, terms):
            total.add_(t[rank])
    return torch.stack([row_max, *totals], dim=1)
