"""Pass 21: where each op's host time goes, function by function (issue 20's host target:
0.3 ms a forward call, 1 ms a forward+backward).

Each case: its host time (one call enqueued behind ~30 ms of queued GEMMs, so that nothing
waits for the GPU; median of 15), then cProfile over 20 such calls, printed in us a call
(pstats' own print rounds to ms): each function's own time and its inclusive time.
cProfile adds its own cost to every Python call (the profiled total exceeds the host
time); the split between functions is what it is for.

    PYTHONPATH=. python docs/h200/pass21/host_calls.py OUT_DIR     (one GPU)
"""
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

from megatron_overlay import ops
from tools.bench.inputs import distill_inputs

H, V = 4096, 151936


def cases(n):
    h, w, ids = distill_inputs(n, H, V, 32, 0)
    labels = ids[:, 0].contiguous()
    temps = torch.full((n,), 0.7, device=h.device)
    hg = h.detach().clone().requires_grad_(True)
    a = torch.randn(n, device=h.device)

    def fb():
        lp, ent = ops.linear_logprob_entropy(hg, w, labels, temperature=0.7)
        (lp * a).sum().backward()

    return h, w, [
        ("logprob_fwd", lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7)),
        ("logprob_fwd_rowT", lambda: ops.linear_logprob_entropy(h, w, labels, temperature=temps)),
        ("at_fwd_k8", lambda: ops.linear_logprobs_at(h, w, ids[:, :8], temperature=0.7)),
        ("at_fwd_k32", lambda: ops.linear_logprobs_at(h, w, ids, temperature=0.7)),
        ("topk_fwd_k1", lambda: ops.linear_topk_logprobs(h, w, 1, temperature=0.7)),
        ("topk_fwd_k8", lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7)),
        ("topk_fwd_k32", lambda: ops.linear_topk_logprobs(h, w, 32, temperature=0.7)),
        ("logprob_fb", fb),
    ]


def busy(h, w, ms=30.0):
    """~ms of queued GEMMs (timed once per shape)."""
    hb = h[:1024]
    torch.matmul(hb, w.T)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        torch.matmul(hb, w.T)
    torch.cuda.synchronize()
    each = (time.perf_counter() - t0) / 10 * 1e3
    reps = max(1, int(ms / each))
    return lambda: [torch.matmul(hb, w.T) for _ in range(reps)]


def per_call(prof, calls):
    st = pstats.Stats(prof)
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
        where = f"{Path(file).name}:{line}({fn})" if file != "~" else fn
        rows.append({"fn": where[:90], "calls": nc / calls, "own_us": tt / calls * 1e6,
                     "incl_us": ct / calls * 1e6})
    return sorted(rows, key=lambda r: -r["own_us"])


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(), "cases": []}
    text = []
    for n in (256, 32768):
        h, w, cs = cases(n)
        queue = busy(h, w)
        for name, call in cs:
            if n > 256 and name not in ("logprob_fwd", "topk_fwd_k8", "topk_fwd_k32"):
                continue
            ctx = torch.enable_grad if name.endswith("_fb") else torch.no_grad
            with ctx():
                for _ in range(3):
                    call()
                torch.cuda.synchronize()
                host = []
                for _ in range(15):
                    queue()
                    t0 = time.perf_counter()
                    call()
                    host.append((time.perf_counter() - t0) * 1e6)
                    torch.cuda.synchronize()
                queue()
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(20):
                    call()
                prof.disable()
                torch.cuda.synchronize()
            rows = per_call(prof, 20)
            case = {"case": name, "n": n, "host_us": round(statistics.median(host), 1),
                    "host_us_all": [round(x, 1) for x in host],
                    "profiled_total_us": round(sum(r["own_us"] for r in rows), 1),
                    "functions": rows[:60]}
            res["cases"].append(case)
            text.append(f"== {name} N={n}: host {case['host_us']} us (median of 15), "
                        f"profiled {case['profiled_total_us']} us a call")
            text.append(f"{'own us':>8} {'incl us':>8} {'calls':>6}  function")
            for r in rows[:45]:
                text.append(f"{r['own_us']:8.1f} {r['incl_us']:8.1f} {r['calls']:6.1f}  {r['fn']}")
            print("\n".join(text[-47:]), flush=True)
        del h, w, cs, queue
        torch.cuda.empty_cache()
    (out / "host_calls.json").write_text(json.dumps(res, indent=1))
    (out / "host_calls.txt").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
