"""The top-k stage on a Triton kernel: ops.stages.TopkStage (topk_forward.py).

What ops/stages.py's ``pick_topk_impl`` returns on CUDA. The backward of the top-k op
needs no kernel of its own: it is the log-prob stages' backward with sparse terms
(triton_impl.backward, ``sparse_ids``). ``CANDIDATES``: the configs tools/bench_distill.py
--sweep tries (``topk_stats(..., config=...)``).
"""

from __future__ import annotations

from .topk_forward import CANDIDATES, topk_stats

__all__ = ["CANDIDATES", "topk_stats"]
