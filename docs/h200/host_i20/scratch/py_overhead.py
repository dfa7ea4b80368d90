"""Our Python's host cost per forward call, Triton's launches stubbed (CPU, interpreter mode)."""
import os, sys, time, cProfile, pstats, io
os.environ["TRITON_INTERPRET"] = "1"
os.environ["MEGATRON_OVERLAY_IMPL"] = "triton"
import torch
from megatron_overlay.ops import label_check, linear_logprob_entropy, linear_logprobs_at, linear_topk_logprobs
from megatron_overlay.ops import validation
from megatron_overlay.ops.kernels import (logprob_forward, finalize_stats, merge_splits, check_ids,
                                          gather_dot, topk_forward, merge_topk)
label_check.check_eagerly = lambda *a, **k: None
label_check.check_ids_eagerly = lambda *a, **k: None
validation.label_check = label_check

class Stub:
    def __getitem__(self, grid):
        return lambda *a, **k: None
for mod, names in ((logprob_forward, ["forward_stats_kernel"]), (finalize_stats, ["finalize_kernel"]),
                   (merge_splits, ["merge_splits_kernel"]), (check_ids, ["check_ids_kernel"]),
                   (gather_dot, ["gather_dot_kernel"]), (topk_forward, ["topk_stats_kernel"]),
                   (merge_topk, ["merge_topk_kernel"])):
    for n in names:
        if hasattr(mod, n):
            setattr(mod, n, Stub())
        else:
            print("no", mod.__name__, n)
N, H, V = int(sys.argv[1]) if len(sys.argv) > 1 else 256, 64, 151936
h = torch.randn(N, H, dtype=torch.bfloat16)
w = torch.randn(V, H, dtype=torch.bfloat16)
y = torch.randint(0, V, (N,))
ids = torch.randint(0, V, (N, 8))
calls = {"logprob": lambda: linear_logprob_entropy(h, w, y, temperature=0.7),
         "at": lambda: linear_logprobs_at(h, w, ids, temperature=0.7),
         "topk": lambda: linear_topk_logprobs(h, w, 8, temperature=0.7)}
with torch.no_grad():
    for name, fn in calls.items():
        for _ in range(20): fn()
        t = time.perf_counter()
        for _ in range(500): fn()
        us = (time.perf_counter() - t) / 500 * 1e6
        print(f"{name}: {us:.1f} us a call (Triton launches stubbed)")
        if "-p" in sys.argv:
            pr = cProfile.Profile(); pr.enable()
            for _ in range(200): fn()
            pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[:3500])
