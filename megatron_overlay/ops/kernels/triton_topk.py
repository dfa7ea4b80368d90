"""The top-k forward stage on a Triton kernel: launch, split choice and the split merge.

Same contract as ``ops/torch_topk.py`` (its docstring). The backward of the top-k op
needs no kernel of its own: it is the log-prob stage's backward (triton_impl.backward)
plus a sparse part (ops/logits_at.py).
"""

from __future__ import annotations

import functools
import math

import torch
import triton

from ..topk_merge import PAD_ID, order_candidates
from . import autotune_configs
from .autotune_configs import KernelConfig
from .topk_forward import topk_stats_kernel
from .triton_impl import (_check_device, _dot_precision, _inv_t_args, _merge_splits, _rowmajor,
                          _sms, _source, _upcast_dot, interpreting, tma_supported)

__all__ = ["topk_stats"]

# The per-split top-k lists ([splits, N, k] values and ids, 8 bytes a pair, plus the 16 bytes
# of statistics) stay under this, and the host merges them a block of rows at a time with
# about MERGE_BUDGET_BYTES of sort temporaries: the forward target is <= 64 MiB
# beyond the outputs.
TOPK_PARTIAL_BUDGET_BYTES = 32 << 20
MERGE_BUDGET_BYTES = 16 << 20
# A work item's fixed cost in vocab tiles (pipeline fill, its first tiles' top-k rounds, its
# partial lists and their merge): what makes 33 splits of 18 tiles slower than 2 of 297.
ITEM_COST_TILES = 2

# The log-prob forward's tile (128 x 256, 8 warps, one work item per multiprocessor): the
# running top-k works on the raw accumulator and keeps only [128, k] values and ids beside
# it (topk_forward.py). fp32 inputs: a narrower tile (3xTF32 dots need more registers).
# Interpreter: tiny tiles.
TOPK_16BIT = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=8)
TOPK_FP32 = KernelConfig(128, 64, 32, num_warps=8, num_stages=3, group_m=8)
# What tools/bench_distill.py --sweep tries.
CANDIDATES = [TOPK_16BIT, KernelConfig(128, 128, 64, num_warps=8, num_stages=3, group_m=8),
              KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=16)]


def _config(dtype: torch.dtype) -> KernelConfig:
    if interpreting():
        return autotune_configs.forward_config(dtype, False, True)
    return TOPK_FP32 if dtype == torch.float32 else TOPK_16BIT


@functools.lru_cache(maxsize=4096)
def _splits(num_m: int, num_v: int, n_rows: int, k: int, num_sms: int) -> tuple[int, int]:
    """(splits, vocab tiles per split), under the partial-list budget.

    The span, waves x (tiles per work item + ITEM_COST_TILES) (the last wave's idle
    multiprocessors count), is what the GEMM costs; among split counts within 1% of the
    shortest span, k > 8 takes the fewest (each split starts with an empty top-k, whose
    first tiles take up to k rounds each), k <= 8 the one nearest two waves (fewer token
    tiles in flight keep their hidden rows in L2). Picked from a sweep of split counts on
    one H200 (docs/BENCHMARKS.md).
    """
    cap = max(1, min(num_v, TOPK_PARTIAL_BUDGET_BYTES // ((16 + 8 * k) * max(n_rows, 1))))
    two_waves = max(1, min(cap, math.ceil(2 * num_sms / num_m)))

    def span(splits: int) -> int:
        per_split = math.ceil(num_v / splits)
        waves = math.ceil(num_m * math.ceil(num_v / per_split) / num_sms)
        return waves * (per_split + ITEM_COST_TILES)

    shortest = min(span(s) for s in range(1, cap + 1))
    near = [s for s in range(1, cap + 1) if span(s) <= shortest * 1.01]
    chosen = near[0] if k > 8 else min(near, key=lambda s: (abs(s - two_waves), s))
    per_split = math.ceil(num_v / chosen)
    return math.ceil(num_v / per_split), per_split


def topk_stats(hidden: torch.Tensor, weight: torch.Tensor, local_labels: torch.Tensor,
               inv_temperature, with_entropy: bool, k: int, *,
               config: KernelConfig | None = None, use_tma: bool | None = None,
               splits: int | None = None):
    _check_device(hidden, weight, local_labels)
    n_tokens, hidden_size = hidden.shape
    vocab = weight.shape[0]
    dev = hidden.device
    stats = torch.zeros(n_tokens, 4, dtype=torch.float32, device=dev)
    if n_tokens == 0 or vocab == 0:
        stats[:, 0] = float("-inf")
        return (stats, torch.full((n_tokens, k), float("-inf"), device=dev),
                torch.full((n_tokens, k), PAD_ID, dtype=torch.int64, device=dev))
    hidden, weight = _rowmajor(hidden), _rowmajor(weight)
    labels = local_labels.contiguous()
    tma = tma_supported(hidden, weight) if use_tma is None else use_tma
    cfg = config or _config(hidden.dtype)

    num_m = triton.cdiv(n_tokens, cfg.block_m)
    num_v = triton.cdiv(vocab, cfg.block_v)
    if splits is None:
        splits, per_split = _splits(num_m, num_v, n_tokens, k, _sms(dev))
    else:  # tools: a given split count (fewer where the vocab tiles run out)
        per_split = math.ceil(num_v / max(1, min(splits, num_v)))
        splits = math.ceil(num_v / per_split)
    part = stats if splits == 1 else torch.empty(splits, n_tokens, 4, dtype=torch.float32,
                                                 device=dev)
    part_v = torch.empty(splits, n_tokens, k, dtype=torch.float32, device=dev)
    part_i = torch.empty(splits, n_tokens, k, dtype=torch.int32, device=dev)
    inv_t_rows, inv_t = _inv_t_args(inv_temperature)
    topk_stats_kernel[(num_m * splits,)](
        _source(hidden, [cfg.block_m, cfg.block_k], tma),
        _source(weight, [cfg.block_v, cfg.block_k], tma),
        labels, part, part_v, part_i, stats if inv_t_rows is None else inv_t_rows,
        n_tokens, vocab, hidden_size, k, hidden.stride(0), weight.stride(0), inv_t,
        splits, per_split, cfg.group_m,
        BLOCK_M=cfg.block_m, BLOCK_V=cfg.block_v, BLOCK_K=cfg.block_k,
        KP=triton.next_power_of_2(k), WITH_ENTROPY=bool(with_entropy), USE_TMA=tma,
        DOT_PRECISION=_dot_precision(hidden.dtype), UPCAST_DOT=_upcast_dot(hidden.dtype),
        ROW_INV_T=inv_t_rows is not None, OPAQUE_COLUMNS=not interpreting(),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if splits > 1:
        _merge_splits(part, stats, bool(with_entropy))
    values = torch.empty(n_tokens, k, dtype=torch.float32, device=dev)
    ids = torch.empty(n_tokens, k, dtype=torch.int64, device=dev)
    step = max(1, MERGE_BUDGET_BYTES // (48 * splits * k))  # ~48 bytes of temporaries a pair
    for r0 in range(0, n_tokens, step):
        rows = slice(r0, r0 + step)
        cand_i = part_i[:, rows].permute(1, 0, 2).reshape(-1, splits * k).long()
        cand_i = torch.where(cand_i >= vocab, PAD_ID, cand_i)  # unfilled slots
        cand_v = part_v[:, rows].permute(1, 0, 2).reshape(-1, splits * k)
        values[rows], ids[rows] = order_candidates(cand_v, cand_i, k)
    return stats, values, ids
