"""The log-prob stages on Triton kernels: ops.stages.LogprobStages, composed of stage files.

    forward_stats   logprob_forward.py  (+ merge_splits.py, split_operand.py)
    finalize        finalize_stats.py
    backward        logprob_backward.py (+ sparse_grad.py, gemm_fp32.py, split_operand.py)
    check_ids       check_ids.py
    logits_at       gather_dot.py
    logits_at_ids   gather_dot.py (+ check_ids.py)
    inverse_temperature_rows    inverse_temperature.py

What ops/stages.py's ``pick_impl`` returns on CUDA. Each stage takes keyword-only extras
for tools and tests (``config``, ``use_tma``; backward also ``chunk_budget``,
``block_tokens``); the ops pass none of them.
"""

from __future__ import annotations

from .check_ids import check_ids
from .finalize_stats import finalize
from .gather_dot import logits_at, logits_at_ids
from .inverse_temperature import inverse_temperature_rows
from .launch import interpreting, tma_supported
from .logprob_backward import backward
from .logprob_forward import forward_stats

__all__ = ["backward", "check_ids", "finalize", "forward_stats", "interpreting",
           "inverse_temperature_rows", "logits_at", "logits_at_ids", "tma_supported"]
