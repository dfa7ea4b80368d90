"""Where one call's host time goes, by layer and piece (issue 20's host targets).

Each op is called CALLS times back to back behind ~BUSY_MS of queued GEMMs (so no call
waits for the GPU: what is timed is the host's enqueue work), twice (the second pass
is reported). Inclusive perf_counter time of wrapped functions (the op layer, the
stages, each kernel's ``launch``, torch.empty / where / mm, the label check's pieces,
TMA descriptors), in us per op call, with how many times each ran per call. ``total``:
the whole call; for fb: forward, the bench's loss and ``backward()`` (tools/bench/
methods.py's fb, as `bench distill/op` time it).
Usage: [METHODS=a,b] python host_probe.py N [N ...]   (H = 4096, V = 151936, bf16, T = 0.7)"""
import collections, cProfile, importlib, io, os, pstats, statistics, sys, time
import torch

from megatron_overlay import ops
from megatron_overlay.ops import label_check, validation, forward_only
from tools.bench.inputs import distill_inputs

T_NS, CALLS_N = collections.defaultdict(int), collections.Counter()


def timed(owner, name, label, static=False):
    orig = getattr(owner, name)
    def w(*a, **k):
        t = time.perf_counter_ns()
        try:
            return orig(*a, **k)
        finally:
            T_NS[label] += time.perf_counter_ns() - t
            CALLS_N[label] += 1
    setattr(owner, name, staticmethod(w) if static else w)


mods = {m: importlib.import_module(f"megatron_overlay.ops.{m}")
        for m in ("linear_logprob", "linear_logprobs_at", "linear_topk", "vocab_parallel")}
for fn_cls in (mods["linear_logprob"].LinearLogprobEntropy,
               mods["linear_logprobs_at"].LinearLogprobsAt,
               mods["linear_topk"].LinearTopkLogprobs):
    timed(fn_cls, "forward", "Function.forward", static=True)
    timed(fn_cls, "backward", "Function.backward", static=True)
for m in ("linear_logprob", "linear_logprobs_at", "linear_topk"):
    mod = mods[m]
    for name in ("validate_inputs", "validate_matrices", "validate_token_ids", "LogprobParams",
                 "inverse_temperature", "shard_labels", "shard_layout", "complete_grads",
                 "backward_at_ids"):
        if hasattr(mod, name):
            timed(mod, name, name)
timed(forward_only, "call", "forward_only.call")
for name in ("host_record", "defer_record", "defer_ids", "poll"):
    timed(label_check, name, f"label_check.{name}")
KERNEL_MODULES = ["check_ids", "finalize_stats", "gather_dot", "logprob_backward",
                  "logprob_forward", "merge_runs", "merge_splits", "merge_topk", "sparse_grad",
                  "split_operand", "tile_sort", "topk_forward", "topk_rescan"]
from megatron_overlay.ops.kernels import triton_impl, triton_topk, launch as launch_mod
for name in ("forward_stats", "finalize", "backward", "check_ids", "logits_at"):
    timed(triton_impl, name, f"stage.{name}")
timed(triton_topk, "topk_stats", "stage.topk_stats")
for m in KERNEL_MODULES:
    mod = importlib.import_module(f"megatron_overlay.ops.kernels.{m}")
    if hasattr(mod, "launch"):
        orig = mod.launch
        def w(kernel, grid, *a, _o=orig, **k):
            label = f"launch:{getattr(kernel, '__name__', kernel)}"
            t = time.perf_counter_ns()
            try:
                return _o(kernel, grid, *a, **k)
            finally:
                T_NS[label] += time.perf_counter_ns() - t
                CALLS_N[label] += 1
        mod.launch = w
    if hasattr(mod, "tile_source"):
        timed(mod, "tile_source", "tile_source (TMA descriptor)")
timed(launch_mod, "_specialization", "launch._specialization")
for name in ("empty", "where", "mm", "addmm", "zeros"):
    timed(torch, name, f"torch.{name}")
_backward = importlib.import_module("megatron_overlay.ops.kernels.logprob_backward")
timed(_backward, "matmul_fp32", "logprob_backward.matmul_fp32")
timed(_backward, "_vocab_chunk", "logprob_backward._vocab_chunk")
timed(torch.cuda.Event, "record", "Event.record")
timed(torch.cuda.Event, "query", "Event.query")

H, V, TEMP = 4096, 151936, 0.7
CALLS, BUSY_MS = 30, 150


def fwd_of(method):
    def fwd(h, w, y, ids):
        with torch.no_grad():
            return method(h, w, y, ids)
    return fwd


def fb_of(method):  # tools/bench/methods.py: Method.fb
    def fb(h, w, y, ids):
        h, w = h.detach().requires_grad_(), w.detach().requires_grad_()
        out = method(h, w, y, ids)
        lp, ent = out
        ((lp * a).sum() + (ent * b).sum() if ent is not None else (lp * a).sum()).backward()
        return h.grad, w.grad
    return fb


METHODS = {
    "gemm": lambda h, w, y, ids: torch.matmul(h, w.T),
    "logprob": fwd_of(lambda h, w, y, ids: ops.linear_logprob_entropy(h, w, y, temperature=TEMP)),
    "logprob_fb": fb_of(lambda h, w, y, ids: ops.linear_logprob_entropy(h, w, y,
                                                                      temperature=TEMP)),
    "at8": fwd_of(lambda h, w, y, ids: ops.linear_logprobs_at(h, w, ids, temperature=TEMP)),
    "at8_fb": fb_of(lambda h, w, y, ids: (ops.linear_logprobs_at(h, w, ids, temperature=TEMP)
                                          [0].sum(1), None)),
    "topk1": fwd_of(lambda h, w, y, ids: ops.linear_topk_logprobs(h, w, 1, temperature=TEMP)),
    "topk8": fwd_of(lambda h, w, y, ids: ops.linear_topk_logprobs(h, w, 8, temperature=TEMP)),
    "topk32": fwd_of(lambda h, w, y, ids: ops.linear_topk_logprobs(h, w, 32, temperature=TEMP)),
}


if os.environ.get("METHODS"):  # a subset, e.g. METHODS=gemm,logprob,logprob_fb
    METHODS = {m: METHODS[m] for m in os.environ["METHODS"].split(",")}


def busy(big, ms):
    bh, bw = big
    t = time.perf_counter()
    for _ in range(max(1, int(ms / 15))):  # ~15 ms each on an H200
        torch.matmul(bh, bw.T)
    return (time.perf_counter() - t) * 1e3


if not torch.cuda.is_available():
    sys.exit("imports ok (no CUDA)")
big = (torch.randn(8192, H, device="cuda", dtype=torch.bfloat16),
       torch.randn(V, H, device="cuda", dtype=torch.bfloat16))
for n in [int(x) for x in sys.argv[1:]]:
    h, w, ids = distill_inputs(n, H, V, 8, 0)
    y = ids[:, 0].contiguous()
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    args = (h, w, y, ids)
    for m, fn in METHODS.items():
        fn(*args); fn(*args)
    torch.cuda.synchronize()
    print(f"== N = {n}: host us per call ({CALLS} calls behind {BUSY_MS} ms of GEMMs)")
    for m, fn in METHODS.items():
        for rep in range(2):
            torch.cuda.synchronize()
            busy(big, BUSY_MS)
            T_NS.clear(); CALLS_N.clear()
            per = []
            for i in range(CALLS):
                t = time.perf_counter_ns()
                fn(*args)
                per.append(time.perf_counter_ns() - t)
            torch.cuda.synchronize()
        print(f"-- {m}: median {statistics.median(per) / 1e3:.1f} us, mean "
              f"{sum(per) / len(per) / 1e3:.1f}, min {min(per) / 1e3:.1f}")
        for label, ns in sorted(T_NS.items(), key=lambda kv: -kv[1]):
            print(f"     {ns / CALLS / 1e3:8.1f} us  x{CALLS_N[label] / CALLS:4.1f}  {label}")
    for m in [m for m in ("logprob_fb", "topk32") if m in METHODS]:
        fn = METHODS[m]
        torch.cuda.synchronize()
        busy(big, BUSY_MS * 2)
        prof = cProfile.Profile()
        prof.enable()
        for i in range(CALLS):
            fn(*args)
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(28)
        print(f"-- cProfile {m}, N = {n}, {CALLS} calls (tottime):")
        print("\n".join(s.getvalue().splitlines()[4:40]))
    sys.stdout.flush()
