"""Pass 22: the small calls' GPU and host time of one tree (run once per tree, alternated).

Each op's forward at N = 256 and 1024 (and 8192, bursts only), H = 4096, V = 151936, bf16,
T = 0.7, on the distillation benchmark's inputs: bursts / single synchronized calls x the
bare bf16 GEMM of the same process (median of 7 rounds of 8 calls), the host time of a
call in a burst (the 2nd-8th of 8 back-to-back calls, median over the rounds), the launches
a call makes and its CUDA time by kernel (torch.profiler, 3 calls), and a digest of its
outputs' bytes (the trees give the same bits where the digests agree).

    PYTHONPATH=TREE:. python docs/h200/pass22/small_ab.py OUT.json     (one GPU)
"""
import hashlib
import json
import statistics
import sys
import time

import torch

from megatron_overlay import ops
from tools.bench.inputs import distill_inputs

ROUNDS, BURST = 7, 8


def methods(h, w, ids):
    labels = ids[:, 0].contiguous()
    out = {"logprob": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7)}
    for k in (1, 8, 32):
        out[f"topk{k}"] = lambda k=k: ops.linear_topk_logprobs(h, w, k, temperature=0.7)
    out["topk8_labels"] = lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7,
                                                           labels=labels, return_entropy=True)
    out["at8"] = lambda: ops.linear_logprobs_at(h, w, ids[:, :8].contiguous(), temperature=0.7)
    return out


def timed(fn, sync):
    """(ms a call, host us a call in a burst): medians over ROUNDS."""
    times, host = [], []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        if sync:
            total = 0.0
            for _ in range(BURST):
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                total += time.perf_counter() - t0
            times.append(total * 1e3 / BURST)
        else:
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record()
            fn()
            t0 = time.perf_counter()
            for _ in range(BURST - 1):
                fn()
            host.append((time.perf_counter() - t0) * 1e6 / (BURST - 1))
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / BURST)
    return statistics.median(times), (statistics.median(host) if host else None)


def by_kernel(fn):
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
            rows[e.key[:40]] = round(t / 3 / 1e3, 4)
    return dict(sorted(rows.items(), key=lambda kv: -kv[1])), launches / 3


def digest(out):
    parts = out if isinstance(out, tuple) else (out,)
    sha = hashlib.sha1()
    for t in parts:
        if isinstance(t, torch.Tensor):
            sha.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()[:12]


def main(path):
    res = []
    for n in (256, 1024, 8192):
        h, w, ids = distill_inputs(n, 4096, 151936, 32, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        floor = {s: timed(gemm, s)[0] for s in (False, True)}
        with torch.no_grad():
            for name, fn in methods(h, w, ids).items():
                if n == 8192 and name in ("topk1", "at8"):
                    continue
                fn()
                burst, host = timed(fn, False)
                sync = timed(fn, True)[0] if n < 8192 else None
                kernels, launches = by_kernel(fn)
                row = {"N": n, "op": name, "burst_x": burst / floor[False],
                       "sync_x": None if sync is None else sync / floor[True],
                       "host_us": host, "gemm_ms": floor, "launches": launches,
                       "kernels_ms": kernels, "digest": digest(tuple(fn()))}
                res.append(row)
                sx = "-" if sync is None else f"{row['sync_x']:.3f}"
                print(f"N={n} {name}: {row['burst_x']:.3f} / {sx} x GEMM, host {host:.0f} us, "
                      f"{launches:.0f} launches, {row['digest']};", json.dumps(kernels),
                      flush=True)
    json.dump({"device": torch.cuda.get_device_name(), "rows": res}, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
