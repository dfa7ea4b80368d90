"""GPU: the top-k op's outputs (ids, log-probs, entropy) against the base package's, bit for
bit, at the shapes where the rescan's row blocks or the early merge differ."""
import sys
import torch
sys.path.insert(0, ".scratch/basefc")
import megatron_overlay_base.ops as base
from megatron_overlay import ops
g = torch.Generator(device="cuda").manual_seed(0)
import os
SHAPES = [(32768, 4096, 151936, 32), (16384, 3584, 152064, 32), (8192, 4096, 151936, 8)]
for n, hd, v, k in SHAPES[:int(os.environ.get("SAME_SHAPES", 3))]:
    h = torch.randn(n, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(v, hd, device="cuda", generator=g) * (4 / hd ** 0.5)).to(torch.bfloat16)
    y = torch.randint(0, v, (n,), device="cuda", generator=g)
    with torch.no_grad():
        a = ops.linear_topk_logprobs(h, w, k, temperature=0.7, labels=y, return_entropy=True)
        b = base.linear_topk_logprobs(h, w, k, temperature=0.7, labels=y, return_entropy=True)
    same = [torch.equal(x, z) for x, z in zip(a, b)]
    print(f"N={n} k={k}: ids, top-k log-probs, log-probs, entropy equal to base: {same}", flush=True)
    del h, w, a, b
    torch.cuda.empty_cache()
