"""Vocab-parallel TP helpers of the fused ops: this rank's shard of the ids, the gather of
every shard's per-token statistics (merged by the stages' ``finalize``), and the
completion of the backward's gradients.

``weight`` is this rank's vocab shard [V_local, H]; shards in rank order; ids are global.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def shard_ids(ids: torch.Tensor, vocab_start: int, local_vocab: int) -> torch.Tensor:
    """Global ids -> indices into this vocab shard, -1 where an id lives elsewhere."""
    local = ids - vocab_start
    return torch.where((local >= 0) & (local < local_vocab), local, torch.full_like(local, -1))


def tp_world(tp_group) -> int:
    """The number of vocab shards of ``tp_group`` (None: 1), which must be a
    torch.distributed ProcessGroup (megatron's tensor-parallel group)."""
    if tp_group is None:
        return 1
    if not isinstance(tp_group, dist.ProcessGroup):
        raise TypeError(f"tp_group must be None or a torch.distributed ProcessGroup (e.g. "
                        f"parallel_state.get_tensor_model_parallel_group()), got "
                        f"{type(tp_group).__name__} {tp_group!r:.40}")
    return dist.get_world_size(tp_group)


def shard_layout(weight: torch.Tensor, tp_group) -> tuple[bool, int, int]:
    """(tensor-parallel?, first global id of this rank's shard, number of shards); shards
    in rank order."""
    world = tp_world(tp_group)
    if world == 1:
        return False, 0, 1
    return True, dist.get_rank(tp_group) * weight.shape[0], world


def shard_labels(labels: torch.Tensor, vocab_start: int, local_vocab: int,
                 ignore_index: int) -> torch.Tensor:
    """Index into this shard. Where the label lives elsewhere, is ignored or is out of
    range the value lies outside [0, local_vocab), which the stages read as "no label"
    (ops/stages.py), so without TP this is ``labels`` itself, no launch at all; only an
    ``ignore_index`` that names a column of this shard is mapped to -1."""
    local = labels - vocab_start if vocab_start else labels
    if 0 <= ignore_index - vocab_start < local_vocab:
        local = torch.where(labels == ignore_index, -1, local)
    return local


def gather_stats(stats: torch.Tensor, tp_group) -> torch.Tensor:
    """Every shard's [N, 4] statistics -> [world, N, 4] in rank order, with one collective
    (the stages' ``finalize`` merges them)."""
    world = dist.get_world_size(tp_group)
    flat = torch.empty((world * stats.shape[0], stats.shape[1]), dtype=stats.dtype,
                       device=stats.device)
    dist.all_gather_into_tensor(flat, stats.contiguous(), group=tp_group)
    return flat.view(world, *stats.shape)


def complete_grads(d_hidden: torch.Tensor | None, d_weight: torch.Tensor | None,
                   hidden: torch.Tensor, weight: torch.Tensor, tp_group):
    """The stages' gradients (None where not asked for) in their operands' dtypes; under
    TP (``tp_group`` not None) each shard's partial d_hidden is all-reduced first, so
    that it is complete on every rank."""
    if d_hidden is not None:
        if tp_group is not None:
            dist.all_reduce(d_hidden, group=tp_group)
        d_hidden = d_hidden.to(hidden.dtype)
    return d_hidden, None if d_weight is None else d_weight.to(weight.dtype)
