"""Pass 10 probe: the top-k's two merges before and after docs/h200/pass10_cpu's change.

"before": best_tiles by k extractions over each row's tiles' maxima, and the rescan's
candidates ordered by merge_topk (k extractions over the row's k (k + 1) / 2); "after"
(the tree's default): best_tiles by selection from merge_topk.SELECT_MIN_K, the candidates
by merge_runs' k-way merge. Outputs compared bit for bit, bursts of 5 calls in 3
interleaved rounds against the bare GEMM, and CUDA time by kernel of one call.

    python docs/h200/pass10/merge_probe.py OUT_JSON
"""
import contextlib
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from megatron_overlay.ops import linear_topk_logprobs
from megatron_overlay.ops.kernels import merge_topk, topk_rescan
from tools.bench.inputs import distill_inputs

T = 0.7
AFTER_MERGE_RUNS = topk_rescan.merge_runs
AFTER_SELECT_MIN_K = merge_topk.SELECT_MIN_K


def _candidates_by_extraction(cand_v, cand_i, vocab, k, out):
    merge_topk.merge_topk(cand_v[None], cand_i[None], vocab, k, out)


@contextlib.contextmanager
def arm(name):
    if name == "before":
        merge_topk.SELECT_MIN_K = 10 ** 9
        topk_rescan.merge_runs = _candidates_by_extraction
    try:
        yield
    finally:
        merge_topk.SELECT_MIN_K = AFTER_SELECT_MIN_K
        topk_rescan.merge_runs = AFTER_MERGE_RUNS


def main():
    out_path = sys.argv[1]
    results = []
    for n, hdim, v in ((8192, 4096, 151936), (16384, 3584, 152064)):
        h, w, _ = distill_inputs(n, hdim, v, 1, seed=5)
        for k in (8, 32, 64):
            def run(name):
                with arm(name), torch.no_grad():
                    return linear_topk_logprobs(h, w, k, temperature=T)
            outs = {name: run(name) for name in ("before", "after")}
            rec = {"shape": [n, hdim, v], "k": k, "same": torch.equal(
                outs["before"].topk_ids, outs["after"].topk_ids) and torch.equal(
                outs["before"].topk_log_probs, outs["after"].topk_log_probs)}
            del outs
            fns = {"gemm": lambda: h @ w.T, "before": lambda: run("before"),
                   "after": lambda: run("after")}
            rec["ms"] = {m: [] for m in fns}
            for _ in range(3):
                for name, fn in fns.items():
                    fn()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    for _ in range(5):
                        fn()
                    e.record()
                    torch.cuda.synchronize()
                    rec["ms"][name].append(s.elapsed_time(e) / 5)
            med = {m: sorted(x)[1] for m, x in rec["ms"].items()}
            rec["x_gemm"] = {m: med[m] / med["gemm"] for m in med}
            rec["profile_ms_a_call"] = {}
            for name in ("before", "after"):
                run(name)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        run(name)
                    torch.cuda.synchronize()
                rec["profile_ms_a_call"][name] = {
                    e.key[:60]: round((getattr(e, "device_time_total", 0) or 0) / 3000.0, 4)
                    for e in prof.key_averages() if (getattr(e, "device_time_total", 0) or 0)}
            print(json.dumps(rec), flush=True)
            results.append(rec)
        del h, w
        json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
