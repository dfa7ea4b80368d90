"""Scratch experiment: 2 CTAs per SM (128x128 tiles, 4 warps) for the top-k and log-prob forward."""
import statistics, sys, json, torch
from tools.bench.inputs import distill_inputs
from megatron_overlay.ops.kernels import topk_forward as tf, logprob_forward as lf
from megatron_overlay.ops.kernels.autotune_configs import KernelConfig

N, H, V = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "8192,4096,151936").split(",")]
sets = [distill_inputs(N, H, V, 1, seed)[:2] for seed in (1, 2)]
labels = torch.full((N,), -1, dtype=torch.int64, device="cuda")
inv_t = 1 / 0.7

def burst(fn, calls=8):
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for i in range(calls):
        fn(*sets[i % 2])
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / calls

C256 = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, group_m=8)
C128w4 = KernelConfig(128, 128, 64, num_warps=4, num_stages=3, group_m=8)
C128w4s2 = KernelConfig(128, 128, 64, num_warps=4, num_stages=2, group_m=8)
C128w8 = KernelConfig(128, 128, 64, num_warps=8, num_stages=3, group_m=8)
methods = {"gemm": lambda h, w: h @ w.T}
for name, cfg in [("fwd256", C256), ("fwd128w4", C128w4), ("fwd128w4s2", C128w4s2), ("fwd128w8", C128w8)]:
    methods[name] = (lambda cfg: lambda h, w: lf.forward_stats(h, w, labels, inv_t, True, config=cfg))(cfg)
def topk(k, cfg=None, sp=None, d=False, lab=True):
    def run(h, w):
        tf.DESTRUCTIVE, tf.HAS_LABELS = d, lab
        return tf.topk_stats(h, w, labels, inv_t, False, k, config=cfg, splits=sp)
    return run
for k in (1, 8, 32):
    methods[f"topk{k}_base"] = topk(k)
    methods[f"topk{k}_nolab"] = topk(k, lab=False)
    methods[f"topk{k}_destr"] = topk(k, d=True, lab=False)
    for sp in (2, 4):
        methods[f"topk{k}_128w4_s{sp}"] = topk(k, C128w4, sp, d=True, lab=False)
ref = {}
for name, fn in methods.items():
    try:
        out = fn(*sets[0]); torch.cuda.synchronize()
        if name.startswith("topk"):
            k = int(name[4:].split("_")[0])
            if k not in ref:
                ref[k] = out
            else:
                print(name, "ids equal", torch.equal(out[2], ref[k][2]), "values equal", torch.equal(out[1], ref[k][1]))
                print(name, "stats maxdiff", (out[0] - ref[k][0]).abs().max().item())
    except Exception as exc:
        print(name, "FAILED", repr(exc)[:300]); methods[name] = None
for _ in range(3):
    burst(methods["gemm"], 20)
times = {n: [] for n, f in methods.items() if f}
for r in range(5):
    for n in times:
        times[n].append(burst(methods[n]))
g = statistics.median(times["gemm"])
for n, t in times.items():
    m = statistics.median(t)
    print(f"{n:22s} {m:8.3f} ms  {m / g:6.3f}x")
for kern in (tf.topk_stats_kernel, lf.forward_stats_kernel):
    for dev, cache in kern.device_caches.items():
        for key, ck in cache[0].items():
            print(kern.fn.__name__, "regs", ck.n_regs, "spills", ck.n_spills, "shared", ck.metadata.shared, "warps", ck.metadata.num_warps)
