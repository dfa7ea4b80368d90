"""Where a top-k call's GPU time goes at N = 256 (k = 8, 32): torch.profiler kernel table."""
import torch
from torch.profiler import profile, ProfilerActivity
from megatron_overlay import ops
g = torch.Generator(device="cuda").manual_seed(0)
h = torch.randn(256, 4096, device="cuda", generator=g).bfloat16()
w = (torch.randn(151936, 4096, device="cuda", generator=g) * 4096 ** -0.5 * 4).bfloat16()
for k in (8, 32):
    with torch.no_grad():
        for _ in range(3):
            ops.linear_topk_logprobs(h, w, k, temperature=0.7)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
            for _ in range(5):
                ops.linear_topk_logprobs(h, w, k, temperature=0.7)
            torch.cuda.synchronize()
    print(f"== k={k}, 5 calls")
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))
