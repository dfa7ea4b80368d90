"""Pass 27, r3: the rescan's CUDA time with 3 / 4 pipeline stages on its sparse path
(topk_rescan.RESCAN_STAGES_SPARSE None / 4) at k = 32, 8192 tokens, H = 4096, V = 151936,
bf16, T = 0.7 (torch.profiler, 3 calls), and the outputs' digests. Prints as it goes.

    PYTHONPATH=. python docs/h200/pass27/stages_big.py      (one GPU)
"""
import sys

import torch

sys.path.insert(0, "docs/h200/pass25")
import tail_ab  # noqa: E402
from megatron_overlay import ops  # noqa: E402
from megatron_overlay.ops.kernels import topk_rescan  # noqa: E402
from tools.bench.inputs import distill_inputs  # noqa: E402

h, w, _ = distill_inputs(8192, 4096, 151936, 32, 0)
with torch.no_grad():
    for stages in (None, 4, None, 4):
        topk_rescan.RESCAN_STAGES_SPARSE = stages
        fn = lambda: ops.linear_topk_logprobs(h, w, 32, temperature=0.7)  # noqa: E731
        out = fn()
        print(f"N=8192 k=32 stages {stages}: {tail_ab.digest(out)}",
              {k: v for k, v in tail_ab.by_kernel(fn).items() if "topk_stats" not in k},
              flush=True)
