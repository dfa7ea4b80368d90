"""Where a top-k call's GPU time goes: torch.profiler's kernel table, 5 calls a case.

    python prof_topk.py PACKAGE N,K [N,K ...]   (H = 4096, V = 151936, bf16, T = 0.7)
PACKAGE: megatron_overlay, or megatron_overlay_base (another commit's, on PYTHONPATH).
SECOND_MAX_MIN_K=K in the environment: set topk_forward's (where it has one).
"""
import importlib
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

ops = importlib.import_module(f"{sys.argv[1]}.ops")
if "SECOND_MAX_MIN_K" in os.environ:
    forward = importlib.import_module(f"{sys.argv[1]}.ops.kernels.topk_forward")
    forward.SECOND_MAX_MIN_K = int(os.environ["SECOND_MAX_MIN_K"])
    print("SECOND_MAX_MIN_K", forward.SECOND_MAX_MIN_K)
g = torch.Generator(device="cuda").manual_seed(0)
w = (torch.randn(151936, 4096, device="cuda", generator=g) * 4096 ** -0.5 * 4).bfloat16()
for case in sys.argv[2:]:
    n, k = map(int, case.split(","))
    h = torch.randn(n, 4096, device="cuda", generator=g).bfloat16()
    with torch.no_grad():
        for _ in range(3):
            ops.linear_topk_logprobs(h, w, k, temperature=0.7)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(5):
                ops.linear_topk_logprobs(h, w, k, temperature=0.7)
            torch.cuda.synchronize()
    print(f"== {sys.argv[1]} N={n} k={k}, 5 calls")
    rows = sorted((e for e in p.key_averages() if e.device_time_total > 0),
                  key=lambda e: -e.device_time_total)
    for e in rows[:8]:
        print(f"  {e.key[:48]:48s} {e.count:4d} calls {e.device_time_total / 5 / 1000:8.3f} ms a call")
    del h
