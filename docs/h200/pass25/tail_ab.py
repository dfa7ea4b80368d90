"""Pass 25: the top-k's tail after its forward kernel, by variant, in one process.

Variants of this tree's settings, (topk_rescan.RESCAN_PREFETCH, RESCAN_STAGES_SPARSE,
tile_sort.SORT_FEW): "before" (False, None, 0: the tree before this pass in behaviour),
"few" (a lone block's few tiled pairs placed without its sort), "prefetch" (and the
rescan's next hidden rows loaded during a step's MMA), "prefetch_s4" (and 4 stages on the
sparse path), "stages4" / "stages6" (the stages without the prefetch).

1. each variant's outputs' digest (the same bits in every variant, or not) and CUDA time
   by kernel (torch.profiler, 3 calls) of the top-k at k = 8, 32 and 8 with labels and
   entropy, N = 256 and 1024 (k = 8 and 32 at 8192), H = 4096, V = 151936, bf16, T = 0.7;
2. "before", "few" and "prefetch" alternated in ROUNDS rounds: bursts / single
   synchronized calls x the bare GEMM of the same round (8 calls each), medians.

    PYTHONPATH=. python docs/h200/pass25/tail_ab.py OUT.json     (one GPU)

($AB_ROUNDS: the rounds of part 2, default 7, 0: no part 2; $AB_VARIANTS: the variants
of part 1, default all; $AB_N: its token counts, default 256,1024,8192. Pass 25's first
run, r1, had the rescan's column parts and persistent programs as variants: see
docs/BENCHMARKS.md.)
"""
import hashlib
import json
import os
import statistics
import sys
import time

import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import tile_sort, topk_rescan
from tools.bench.inputs import distill_inputs

ROUNDS, BURST = int(os.environ.get("AB_ROUNDS", 7)), 8
H, V = 4096, 151936
VARIANTS = {  # (RESCAN_PREFETCH, RESCAN_STAGES_SPARSE, SORT_FEW)
    "before": (False, None, 0), "few": (False, None, 128), "prefetch": (True, None, 128),
    "prefetch_s4": (True, 4, 128), "stages4": (False, 4, 128), "stages6": (False, 6, 128)}
COMPARED = ("before", "few", "prefetch")
PART1 = os.environ.get("AB_VARIANTS", ",".join(VARIANTS)).split(",")
PART1_N = [int(n) for n in os.environ.get("AB_N", "256,1024,8192").split(",")]
DEFAULT = (topk_rescan.RESCAN_PREFETCH, topk_rescan.RESCAN_STAGES_SPARSE, tile_sort.SORT_FEW)


def use(variant):
    topk_rescan.RESCAN_PREFETCH, topk_rescan.RESCAN_STAGES_SPARSE, tile_sort.SORT_FEW = variant


def calls(h, w, ids):
    labels = ids[:, 0].contiguous()
    return {"topk8": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7),
            "topk32": lambda: ops.linear_topk_logprobs(h, w, 32, temperature=0.7),
            "topk8_labels": lambda: ops.linear_topk_logprobs(
                h, w, 8, temperature=0.7, labels=labels, return_entropy=True)}


def digest(out):
    sha = hashlib.sha1()
    for t in out:
        if isinstance(t, torch.Tensor):
            sha.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()[:12]


def by_kernel(fn):
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
            rows[e.key[:28]] = round(t / 3 / 1e3, 4)
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


def timed(fn, sync):
    torch.cuda.synchronize()
    if sync:
        t0 = time.perf_counter()
        for _ in range(BURST):
            fn()
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / BURST
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(BURST):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / BURST


def kernels_part():
    rows = []
    for n in PART1_N:
        h, w, ids = distill_inputs(n, H, V, 32, 0)
        with torch.no_grad():
            for name, fn in calls(h, w, ids).items():
                if n == 8192 and name == "topk8_labels":
                    continue
                for vname, variant in VARIANTS.items():
                    if vname not in PART1:
                        continue
                    if n == 8192 and vname not in ("before", "few", "prefetch", "prefetch_s4"):
                        continue
                    use(variant)
                    out = fn()
                    row = {"N": n, "op": name, "variant": vname, "digest": digest(out),
                           "kernels_ms": by_kernel(fn)}
                    rows.append(row)
                    tail = {k: v for k, v in row["kernels_ms"].items() if "topk_stats" not in k}
                    print(f"N={n} {name} {vname}: {row['digest']} tail "
                          f"{sum(tail.values()) * 1e3:.1f} us", json.dumps(row["kernels_ms"]),
                          flush=True)
        del h, w, ids
    use(DEFAULT)
    return rows


def ratios_part():
    rows = []
    for n in (256, 1024):
        h, w, ids = distill_inputs(n, H, V, 32, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        per = {}
        with torch.no_grad():
            ops_ = calls(h, w, ids)
            for fn in ops_.values():
                for vname in COMPARED:
                    use(VARIANTS[vname])
                    fn()
            for _ in range(ROUNDS):
                floor = {s: timed(gemm, s) for s in (False, True)}
                for name, fn in ops_.items():
                    for vname in COMPARED:
                        use(VARIANTS[vname])
                        for s in (False, True):
                            per.setdefault((name, vname, s), []).append(timed(fn, s) / floor[s])
        for name in ops_:
            row = {"N": n, "op": name}
            for vname in COMPARED:
                row[vname] = [statistics.median(per[name, vname, s]) for s in (False, True)]
            rows.append(row)
            print(f"N={n} {name}: " + ", ".join(
                f"{v} {row[v][0]:.3f} / {row[v][1]:.3f}" for v in COMPARED)
                + " x GEMM (bursts / synchronized)", flush=True)
        del h, w, ids
    use(DEFAULT)
    return rows


def main(path):
    print("default", DEFAULT, torch.cuda.get_device_name(), flush=True)
    res = {"device": torch.cuda.get_device_name(), "default": DEFAULT}
    res["kernels"] = kernels_part()
    same = {}
    for r in res["kernels"]:
        same.setdefault((r["N"], r["op"]), set()).add(r["digest"])
    res["same_bits"] = all(len(d) == 1 for d in same.values())
    print("same bits in every variant:", res["same_bits"], flush=True)
    json.dump(res, open(path, "w"), indent=1)
    if not ROUNDS:
        return
    res["ratios"] = ratios_part()
    json.dump(res, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
