"""A single synchronized call's host time before its first kernel reaches the GPU, by layer
(issue 20: the synchronized protocol waits for it). Stamps (perf_counter) at: the op's
entry, the autograd Function's forward, the stage (forward_stats / topk_stats), the main
kernel's `launch` entry (after its allocations and TMA descriptors) and return. Cold: one
call after a sync (the GPU idle); warm: the second of two calls back to back. Medians of
30, us. Usage: python prelaunch_probe.py N [N ...]   (H = 4096, V = 151936, bf16, T = 0.7)"""
import statistics, sys, time
import torch
from megatron_overlay import ops
import importlib
linear_logprob, linear_logprobs_at, linear_topk = (
    importlib.import_module(f"megatron_overlay.ops.{m}")
    for m in ("linear_logprob", "linear_logprobs_at", "linear_topk"))
from megatron_overlay.ops.kernels import logprob_forward, topk_forward, triton_impl, triton_topk
from tools.bench.inputs import distill_inputs

stamps = []
def stamp(label):
    stamps.append((label, time.perf_counter()))
def wrap_fn(owner, name, label):
    orig = getattr(owner, name)
    def w(*a, **k):
        stamp(label); return orig(*a, **k)
    setattr(owner, name, w)
for fn_cls in (linear_logprob.LinearLogprobEntropy, linear_logprobs_at.LinearLogprobsAt,
               linear_topk.LinearTopkLogprobs):
    orig = fn_cls.forward
    fn_cls.forward = staticmethod(lambda *a, _o=orig, **k: (stamp("Function.forward"), _o(*a, **k))[1])
wrap_fn(triton_impl, "forward_stats", "stage")
wrap_fn(triton_topk, "topk_stats", "stage")
for mod, kern in ((logprob_forward, "forward_stats_kernel"), (topk_forward, "topk_stats_kernel")):
    orig = mod.launch
    def w(kernel, grid, *a, _o=orig, _k=kern, **k):
        main = getattr(kernel, "__name__", "") == _k and not any(l == "launched" for l, _ in stamps)
        if main: stamp("launch")
        _o(kernel, grid, *a, **k)
        if main: stamp("launched")
    mod.launch = w

H, V, T = 4096, 151936, 0.7
def gemm(h, w, y, ids): return torch.matmul(h, w.T)
def logprob(h, w, y, ids):
    with torch.no_grad(): return ops.linear_logprob_entropy(h, w, y, temperature=T)
def at8(h, w, y, ids):
    with torch.no_grad(): return ops.linear_logprobs_at(h, w, ids, temperature=T)
def topk8(h, w, y, ids):
    with torch.no_grad(): return ops.linear_topk_logprobs(h, w, 8, temperature=T)
METHODS = {"gemm": gemm, "logprob": logprob, "at8": at8, "topk8": topk8}
ORDER = ["Function.forward", "stage", "launch", "launched"]
med = statistics.median
if not torch.cuda.is_available(): sys.exit("imports ok")
for n in [int(x) for x in sys.argv[1:]]:
    h, w, ids = distill_inputs(n, H, V, 8, 0)
    y = ids[:, 0].contiguous()
    args = (h, w, y, ids)
    for fn in METHODS.values():
        fn(*args); fn(*args)
    torch.cuda.synchronize()
    print(f"== N = {n}: us from the call's start (medians of 30); labels contiguous")
    for m, fn in METHODS.items():
        rows = {"cold": [], "warm": []}
        for r in range(30):
            for mode in ("cold", "warm"):
                torch.cuda.synchronize()
                if mode == "warm":
                    fn(*args)
                stamps.clear()
                t0 = time.perf_counter(); fn(*args); t1 = time.perf_counter()
                got = {l: (t - t0) * 1e6 for l, t in stamps}
                got["return"] = (t1 - t0) * 1e6
                rows[mode].append(got)
        for mode, got in rows.items():
            cols = [c for c in ORDER + ["return"] if all(c in g for g in got)]
            print(f"  {m:8s} {mode}: " + "  ".join(f"{c} {med([g[c] for g in got]):7.1f}"
                                                  for c in cols))
    sys.stdout.flush()
