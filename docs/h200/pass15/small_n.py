"""Where a small call's GPU time goes (issue 20: rollout-side scoring, N = 256 / 1024).

Each op's forward (the log-prob op, the top-k at k = 1, 8, 32, log-probs at k = 32 ids)
at H = 4096, V = 151936, bf16, T = 0.7: bursts / single synchronized calls x the bare bf16
GEMM (pass 14's ``ms_per_call``: median of 5 rounds of 8 calls), then one call's CUDA time
by kernel under torch.profiler (3 calls, ms a call), and the launches a call makes.

    PYTHONPATH=. python docs/h200/pass15/small_n.py OUT.json       (one GPU)
"""
import json
import sys

import torch

sys.path.insert(0, "docs/h200/pass14")
from topk_splits import ms_per_call  # noqa: E402

from megatron_overlay import ops  # noqa: E402
from tools.bench.inputs import distill_inputs  # noqa: E402


def methods(h, w, ids):
    labels = ids[:, 0].contiguous()
    out = {"logprob": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7)}
    for k in (1, 8, 32):
        out[f"topk{k}"] = lambda k=k: ops.linear_topk_logprobs(h, w, k, temperature=0.7)
    out["at32"] = lambda: ops.linear_logprobs_at(h, w, ids, temperature=0.7)
    return out


def by_kernel(fn):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    rows, launches = {}, 0
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if e.key in ("cuLaunchKernelEx", "cudaLaunchKernel", "cuLaunchKernel"):
            launches += e.count
        if t > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
            rows[e.key[:60]] = round(t / 3 / 1e3, 4)
    return dict(sorted(rows.items(), key=lambda kv: -kv[1])), launches / 3


def main(path):
    out = []
    for n in (256, 1024):
        h, w, ids = distill_inputs(n, 4096, 151936, 32, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        floor = {s: ms_per_call(gemm, s) for s in (False, True)}
        with torch.no_grad():
            for name, fn in methods(h, w, ids).items():
                fn()
                burst, sync = ms_per_call(fn, False), ms_per_call(fn, True)
                kernels, launches = by_kernel(fn)
                row = {"N": n, "op": name, "burst_x": burst / floor[False],
                       "sync_x": sync / floor[True], "burst_ms": burst, "sync_ms": sync,
                       "gemm_ms": floor, "launches": launches, "kernels_ms": kernels}
                out.append(row)
                print(f"N={n} {name}: {row['burst_x']:.3f} / {row['sync_x']:.3f} x GEMM "
                      f"({burst:.3f} / {sync:.3f} ms), {launches:.0f} launches;",
                      json.dumps(kernels), flush=True)
    json.dump(out, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
