"""Pass 17: the forward kernels' max subtraction in raw logit units (_online_stats.fold_max),
timed against the tree before it, in one process, and its precision at small temperatures.

"before" is b77d541's ``megatron_overlay/ops`` as a top-level package ``ops_before``
(its imports are relative), made by

    git archive b77d541 megatron_overlay/ops | tar -x -C /tmp/b
    mv /tmp/b/megatron_overlay/ops /tmp/b/ops_before
    PYTHONPATH=/tmp/b:. python docs/h200/pass17/fold_ab.py OUT.json        (one GPU)

Timing: bf16, T = 0.7, forwards without grad (the log-prob op with labels and entropy,
per-token temperatures at 8192 tokens too; the top-k at k = 1, 8, 32), the project's
protocol (tools.bench.timing.interleaved: bursts of ~300 ms, 5 rounds, the order rotated
each round, the GPU heated first), medians of each round's ratio to the bare bf16 GEMM and
of after / before. Precision: fp32 and bf16 operands, N = 1024, H = 4096, V = 151936, the
log-prob at each row's argmax and the entropy, before and after, against the torch path.
"""
import json
import statistics
import sys

import torch

import ops_before
from megatron_overlay import ops as ops_after
from tools.bench.inputs import distill_inputs
from tools.bench.timing import interleaved

SHAPES = [(8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)]
ROUNDS, BURST_MS = 5, 300.0


def methods(ops, h, w, labels, n):
    rows_t = torch.full((n,), 0.7, device="cuda")
    out = {"logprob": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7)}
    if n == 8192:
        out["logprob_rowT"] = lambda: ops.linear_logprob_entropy(h, w, labels,
                                                                 temperature=rows_t)
    for k in (1, 8, 32):
        out[f"topk{k}"] = lambda k=k: ops.linear_topk_logprobs(h, w, k, temperature=0.7)
    return out


def paired(a, b):
    """The median over rounds of a round's ratio a / b (tools.bench.timing's protocol)."""
    return round(statistics.median(x / y for x, y in zip(a.ms, b.ms)), 4)


def timing():
    res = []
    for n, hd, v in SHAPES:
        h, w, ids = distill_inputs(n, hd, v, 1, 0)
        labels = ids[:, 0].contiguous()
        with torch.no_grad():
            a, b = methods(ops_before, h, w, labels, n), methods(ops_after, h, w, labels, n)
            for name in a:
                fns = {"gemm": lambda: torch.matmul(h, w.T), "before": a[name],
                       "after": b[name]}
                t = interleaved(fns, [()], ROUNDS, burst_ms=BURST_MS, heat_s=1.0)
                row = {"n": n, "h": hd, "v": v, "op": name,
                       **{f"{k}_ms": round(t[k].median_ms, 4) for k in fns},
                       "before_x": paired(t["before"], t["gemm"]),
                       "after_x": paired(t["after"], t["gemm"]),
                       "after_over_before": paired(t["after"], t["before"])}
                print(json.dumps(row), flush=True)
                res.append(row)
        del h, w, ids, labels
        torch.cuda.empty_cache()
    return res


def precision():
    import os
    res = []
    g = torch.Generator(device="cuda").manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        h = torch.randn(1024, 4096, device="cuda", generator=g)
        w = torch.randn(151936, 4096, device="cuda", generator=g) * 4096 ** -0.5 * 4
        h, w = h.to(dtype), w.to(dtype)
        with torch.no_grad():
            top = (h.float() @ w.float().T).argmax(1)
            for t in (1.0, 1e-2, 1e-3, 1e-4, 1e-6, 1e-8):
                os.environ["MEGATRON_OVERLAY_IMPL"] = "torch"
                lp_r, ent_r = ops_after.linear_logprob_entropy(h, w, top, temperature=t)
                os.environ.pop("MEGATRON_OVERLAY_IMPL")
                row = {"dtype": str(dtype), "T": t}
                for name, ops in (("before", ops_before), ("after", ops_after)):
                    lp, ent = ops.linear_logprob_entropy(h, w, top, temperature=t)
                    row[name] = {"argmax_lp_err": (lp - lp_r).abs().max().item(),
                                 "entropy_err": (ent - ent_r).abs().max().item(),
                                 "nonfinite_rows": int((~(lp.isfinite()
                                                          & ent.isfinite())).sum())}
                print(json.dumps(row), flush=True)
                res.append(row)
        del h, w
        torch.cuda.empty_cache()
    return res


def same_outputs():
    """T = 0.7, one shape: how far after's outputs moved from before's (rounding only)."""
    h, w, ids = distill_inputs(4096, 4096, 151936, 1, 3)
    labels = ids[:, 0].contiguous()
    out = {}
    with torch.no_grad():
        la, ea = ops_before.linear_logprob_entropy(h, w, labels, temperature=0.7)
        lb, eb = ops_after.linear_logprob_entropy(h, w, labels, temperature=0.7)
        out["logprob_max_diff"] = (la - lb).abs().max().item()
        out["entropy_max_diff"] = (ea - eb).abs().max().item()
        for k in (1, 8, 32):
            ta = ops_before.linear_topk_logprobs(h, w, k, temperature=0.7)
            tb = ops_after.linear_topk_logprobs(h, w, k, temperature=0.7)
            out[f"topk{k}_ids_equal"] = bool(torch.equal(ta.topk_ids, tb.topk_ids))
            out[f"topk{k}_max_diff"] = (ta.topk_log_probs - tb.topk_log_probs).abs().max().item()
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    result = {"device": torch.cuda.get_device_name(), "same": same_outputs(),
              "precision": precision(), "timing": timing()}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1)
