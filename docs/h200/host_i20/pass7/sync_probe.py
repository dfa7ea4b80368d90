"""Where a single synchronized call's time goes (issue 20: the synchronized protocol reads
2-4% above the bursts). For each op and N: the call's GPU time (start event -> end event,
as tools/bench's synchronized protocol), and for each Triton launch of the call the host's
submit time and the GPU's time when it reached the launch (an event recorded just before
it), medians over single calls interleaved with the GEMM's; then the same ops in bursts.
Usage: python sync_probe.py N [N ...]   (H = 4096, V = 151936, bf16, T = 0.7)"""
import importlib, statistics, sys, time
import torch
from megatron_overlay import ops
from tools.bench.inputs import distill_inputs
from tools.bench.distill import labels_of  # contiguous labels (pass 7's second run on)

MODS = ["check_ids", "finalize_stats", "gather_dot", "logprob_forward", "merge_splits",
        "merge_topk", "tile_sort", "topk_forward", "topk_rescan"]
marks = []  # (name, host t, event) of the current call's launches; None: not recording
rec = {"on": False}
for name in MODS:
    mod = importlib.import_module(f"megatron_overlay.ops.kernels.{name}")
    orig = mod.launch
    def wrapped(kernel, grid, *a, _orig=orig, **k):
        if rec["on"]:
            ev = torch.cuda.Event(enable_timing=True); ev.record()
            marks.append((getattr(kernel, "__name__", str(kernel)), time.perf_counter(), ev))
        return _orig(kernel, grid, *a, **k)
    mod.launch = wrapped

H, V, T = 4096, 151936, 0.7
def gemm(h, w, ids): return torch.matmul(h, w.T)
def logprob(h, w, ids):
    with torch.no_grad(): return ops.linear_logprob_entropy(h, w, labels_of(ids), temperature=T)
def at8(h, w, ids):
    with torch.no_grad(): return ops.linear_logprobs_at(h, w, ids[:, :8], temperature=T)
def topk(k):
    def run(h, w, ids):
        with torch.no_grad(): return ops.linear_topk_logprobs(h, w, k, temperature=T)
    return run
METHODS = {"gemm": gemm, "logprob": logprob, "at8": at8, "topk8": topk(8), "topk32": topk(32)}

def single(fn, args, events):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    marks.clear(); rec["on"] = events
    s.record(); t0 = time.perf_counter()
    fn(*args)
    t1 = time.perf_counter(); e.record(); rec["on"] = False
    e.synchronize()
    launches = [(n, (t - t0) * 1e3, s.elapsed_time(ev)) for n, t, ev in marks]
    return s.elapsed_time(e), (t1 - t0) * 1e3, launches

def bursts(fn, sets, calls):
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(calls): fn(*sets[i % 2])
    e.record(); e.synchronize()
    return s.elapsed_time(e) / calls

med = statistics.median
for n in [int(x) for x in sys.argv[1:]]:
    sets = [distill_inputs(n, H, V, 32, seed) for seed in (0, 1)]
    sets = [(h, sets[0][1], ids) for h, _, ids in sets]
    for fn in METHODS.values():
        for a in sets: fn(*a)
    torch.cuda.synchronize()
    for i in range(40): gemm(*sets[0])  # heat
    res = {m: {"gpu": [], "host": [], "launch": [], "gpu_plain": []} for m in METHODS}
    for r in range(15):
        for m, fn in METHODS.items():
            g, hst, l = single(fn, sets[r % 2], events=True)
            res[m]["gpu"].append(g); res[m]["host"].append(hst); res[m]["launch"].append(l)
            g2, _, _ = single(fn, sets[(r + 1) % 2], events=False)
            res[m]["gpu_plain"].append(g2)
    calls = max(3, int(300 / med(res["gemm"]["gpu"])))
    burst = {m: med([bursts(fn, sets, calls) for _ in range(3)]) for m, fn in METHODS.items()}
    print(f"== N = {n}: single synchronized calls (medians of 15; events = with an event "
          f"before each Triton launch), bursts of {calls} calls (median of 3), ms")
    g0, b0 = med(res["gemm"]["gpu_plain"]), burst["gemm"]
    for m in METHODS:
        r = res[m]
        gp = med(r["gpu_plain"])
        print(f"{m:8s} single {gp:8.3f} ({gp / g0:.3f}x gemm)  with events {med(r['gpu']):8.3f}"
              f"  host {med(r['host']):.3f}  bursts {burst[m]:8.3f} ({burst[m] / b0:.3f}x)"
              f"  single - bursts {gp - burst[m]:+.3f}")
        if r["launch"][0]:
            names = [x[0] for x in r["launch"][0]]
            for j, nm in enumerate(names):
                hs = med([l[j][1] for l in r["launch"] if len(l) > j])
                gs = med([l[j][2] for l in r["launch"] if len(l) > j])
                print(f"    {nm:28s} host submit {hs:7.3f}  GPU reaches it {gs:8.3f}")
    sys.stdout.flush()
    del sets; torch.cuda.empty_cache()
