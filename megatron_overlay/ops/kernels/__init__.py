"""Triton kernels of the fused ops, one file per stage: its kernel(s) and their launcher.

    logprob_forward.py    per-token statistics: online log-sum-exp over vocab tiles
    topk_forward.py       the same statistics plus a running top-k, in one pass
    merge_splits.py       the forward stages' per-split statistics -> per-token ones
    logprob_backward.py   recomputed logits tile -> d(loss)/d(logits) chunk (bf16/fp16/fp32)
    sparse_grad.py        backward: the sparse indicator terms added to that chunk
    gemm_fp32.py          backward: the chunk's two cuBLAS GEMMs with fp32 outputs (no Triton)
    gather_dot.py         logits at a few given ids per token
    split_operand.py      mixed operands: an fp32 operand as 16-bit hi + lo halves
    _online_stats.py      device helpers of both forward kernels (work item, folds, stores)
    _tiles.py             device tile helpers (TMA or pointer loads, grouped tile order)
    launch.py             host helpers of every launcher (devices, load paths, arguments,
                          and launch(): kernel[grid] through a cache of compiled kernels)
    autotune_configs.py   block shapes, warps, stages, loop forms, and the named budgets
    triton_impl.py        the log-prob stages as one implementation (ops/stages.py)
    triton_topk.py        the top-k stage as one implementation

Importing this package needs nothing; the stage files need Triton (gemm_fp32 and
autotune_configs need torch only).
"""
