"""Peak extra memory of one call, from the caching allocator's counters."""

from __future__ import annotations

import gc

import torch

GiB = float(1 << 30)


def peak_extra_gib(fn, args, exclude_bytes: int = 0) -> float | None:
    """Peak bytes allocated during fn(*args) beyond what was allocated before it, minus
    ``exclude_bytes`` (e.g. the gradients every method must return), in GiB; None for CPU
    tensors (the caching allocator's counters are CUDA's)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or not tensors[0].is_cuda:
        return None
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    gc.collect()
    torch.cuda.empty_cache()
    return max(peak - exclude_bytes, 0) / GiB
