"""Batch invariance: a token's log-prob, entropy and top-k do not depend on the other tokens.

The same (hidden row, label, weight, temperature) gives bitwise the same outputs whatever
the number of tokens N in the call and the row's position, when this is on (the default;
``MEGATRON_OVERLAY_BATCH_INVARIANT=0`` turns it off). What it takes, per path:

* Triton (ops/kernels/): the vocab split count of the forward depends on V and the GPU
  only, never on N (``logprob_forward.choose_splits``); splits are merged by a kernel
  that folds them in a fixed order per row; rows are never split across programs. The
  top-k kernel takes the same splits (one per chunk of vocab tiles,
  ``invariant_chunk_tiles``) and folds and stores its statistics per chunk, merged in
  chunk order; its top-k values are dot products, the same whatever the split, and the
  lists merge by value, then id. Its rescan's path does depend on N (the tiles' second
  maxima from k = 8 in calls of up to 4096 rows, exact from k = 16 in calls of up to
  2048, ``topk_forward._second_max``):
  allowed because a known maximum or second maximum (the forward kernel's logit) and a
  recomputed one (the rescan's) are the same bits (``test_second_maxima_change_no_bit``,
  ``test_topk_is_invariant_across_the_second_maxima_threshold`` and
  ``..._exact_second_maxima_threshold``, on a GPU).
* torch (CPU): every GEMM and every element-wise tile op runs on fixed-size token tiles
  (the last one zero-padded), because BLAS results can depend on the M dimension; and
  transcendental functions on [N] vectors run in fixed-size blocks (``per_element``),
  because ATen computes a vector's tail with the scalar libm function and the rest with
  SIMD code, which can differ in the last bit.
* The merge of TP shards (the stages' ``finalize``) adds shards in rank order; top-k
  lists merge by value, then id.

The backward (d_hidden rows) is not covered: cuBLAS picks its algorithm by shape.
"""

from __future__ import annotations

import torch

from .env_flags import env_flag

ENV = "MEGATRON_OVERLAY_BATCH_INVARIANT"
# Below ATen's parallel grain (32768 elements): one thread, and a multiple of every SIMD
# width, so no element goes through the scalar tail loop.
CPU_BLOCK = 4096


def enabled() -> bool:
    """``$MEGATRON_OVERLAY_BATCH_INVARIANT`` (ops/env_flags.py): on unless set to 0 / false
    / no / off (before, only 0 turned it off)."""
    return env_flag(ENV, True, "1: batch-invariant kernels; 0: off")


def per_element(fn, x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for an element-wise ``fn``, computed the same way for every element.

    On CPU with batch invariance on: in zero-padded ``CPU_BLOCK`` blocks (padding with
    ones). Elsewhere ``fn(x)`` (CUDA element-wise kernels compute every element alike).
    """
    if x.device.type != "cpu" or not enabled():
        return fn(x)
    flat = x.contiguous().view(-1)
    out = torch.empty_like(flat)
    for i in range(0, flat.numel(), CPU_BLOCK):
        block = flat[i:i + CPU_BLOCK]
        if block.numel() < CPU_BLOCK:
            padded = torch.ones(CPU_BLOCK, dtype=flat.dtype)
            padded[:block.numel()] = block
            block = padded
        result = fn(block)
        out[i:i + CPU_BLOCK] = result[:out[i:i + CPU_BLOCK].numel()]
    return out.view(x.shape)
