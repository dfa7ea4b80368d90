"""Triton kernels of the fused ops, one file per stage: its kernel(s) and their launcher.

    logprob_forward.py    per-token statistics: online log-sum-exp over vocab tiles
    topk_forward.py       the same statistics plus each (row, vocab tile)'s maximum
    topk_rescan.py        top-k, second stage: those tiles recomputed, the exact k kept
    tile_sort.py          the rescan's (row, tile) pairs ordered by tile (counting sort)
    merge_topk.py         candidate lists (splits', tiles' maxima) -> each row's ordered best k
    merge_runs.py         the rescan's candidates (k ordered runs a row) -> its top k
    merge_splits.py       the forward stages' per-split statistics -> per-token ones
    finalize_stats.py     statistics -> lse, entropy, log-probs and the label check's record
    check_ids.py          given ids checked and sharded, with their record
    logprob_backward.py   recomputed logits tile -> d(loss)/d(logits) chunk (bf16/fp16/fp32)
    sparse_grad.py        backward: the sparse indicator terms added to that chunk
    gemm_fp32.py          backward: the chunk's two cuBLAS GEMMs with fp32 outputs (no Triton)
    gather_dot.py         logits at a few given ids per token (with check_ids' check: one launch)
    split_operand.py      mixed operands: an fp32 operand as 16-bit hi + lo halves
    _record.py            the label check's record: its row store and its buffer
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
