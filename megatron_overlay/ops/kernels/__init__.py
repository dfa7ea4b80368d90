"""Triton kernels of the fused log-prob/entropy op, one file per stage.

    logprob_forward.py    per-token statistics: online log-sum-exp over vocab tiles
    logprob_backward.py   recomputed logits tile -> d(loss)/d(logits) tile (bf16/fp16/fp32)
    _tiles.py             shared tile helpers (TMA or pointer loads, grouped tile order)
    autotune_configs.py   block shapes, warps, stages, loop forms, and the named budgets
    triton_impl.py        the two stage functions the autograd Function calls (launches)

Importing this package needs nothing; ``triton_impl`` needs Triton.
"""
