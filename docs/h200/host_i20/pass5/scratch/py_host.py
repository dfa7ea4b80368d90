"""Our Python's host cost a call on the CPU machine: the Triton stages' host code with every
kernel launch stubbed (interpreter build, tiny tensors). Usage: py_host.py [-p NAME]"""
import os, sys, time, cProfile, pstats, io
os.environ["TRITON_INTERPRET"] = "1"
os.environ["MEGATRON_OVERLAY_IMPL"] = "triton"
import importlib
import torch
from megatron_overlay import ops
from megatron_overlay.ops import label_check
names = ["check_ids", "finalize_stats", "gather_dot", "logprob_backward", "logprob_forward",
         "merge_splits", "merge_topk", "sparse_grad", "split_operand", "tile_sort",
         "topk_forward", "topk_rescan"]
for n in names:
    m = importlib.import_module(f"megatron_overlay.ops.kernels.{n}")
    m.launch = lambda *a, **k: None
label_check.check_eagerly = lambda *a, **k: None
N, H, V = 64, 16, 256
h = torch.randn(N, H, dtype=torch.bfloat16)
w = torch.randn(V, H, dtype=torch.bfloat16)
y = torch.randint(0, V, (N,))
ids = torch.randint(0, V, (N, 8))
hg, wg = h.clone().requires_grad_(), w.clone().requires_grad_()
def fb():
    lp, ent = ops.linear_logprob_entropy(hg, wg, y, temperature=0.7)
    (lp.sum() + ent.sum()).backward()
def fwd():
    with torch.no_grad():
        return ops.linear_logprob_entropy(h, w, y, temperature=0.7)
def at():
    with torch.no_grad():
        return ops.linear_logprobs_at(h, w, ids, temperature=0.7)
def topk8():
    with torch.no_grad():
        return ops.linear_topk_logprobs(h, w, 8, temperature=0.7)
calls = {"fwd": fwd, "fb": fb, "at": at, "topk8": topk8}
for name, fn in calls.items():
    try:
        for _ in range(10): fn()
    except Exception as e:
        print(name, "failed", repr(e)[:300]); continue
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(100): fn()
        best = min(best, (time.perf_counter() - t) / 100 * 1e6)
    print(f"{name}: {best:.1f} us a call (launches stubbed)")
if "-p" in sys.argv:
    fn = calls[sys.argv[sys.argv.index("-p") + 1]]
    pr = cProfile.Profile(); pr.enable()
    for _ in range(200): fn()
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue()[:6000])
