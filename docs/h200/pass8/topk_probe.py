"""Pass 8 probe: the top-k forward with its two merges ordering by Triton's bitonic
``tl.topk`` against k extractions of the row maximum (merge_topk.BITONIC): the same
outputs, bursts in rounds against the bare GEMM, and CUDA time by kernel of one call.

    python docs/h200/pass8/topk_probe.py OUT_JSON

Ran (r1) on a tree with merge_topk.BITONIC (dropped after it; r1/machine.txt names
that tree's files): a record; on main both arms now run the k extractions.
"""
import json
import sys

import torch

from megatron_overlay.ops import linear_topk_logprobs
from megatron_overlay.ops.kernels import merge_topk
from tools.bench.inputs import distill_inputs

T = 0.7


def main():
    out_path = sys.argv[1]
    results = []
    for n, hdim, v in ((8192, 4096, 151936), (16384, 3584, 152064)):
        h, w, _ = distill_inputs(n, hdim, v, 1, seed=5)
        for k in (8, 32):
            rec = {"shape": [n, hdim, v], "k": k, "ms": {"gemm": [], "extract": [],
                                                          "bitonic": []}}
            outs = {}
            fns = {"gemm": lambda: h @ w.T}
            for name, flag in (("extract", False), ("bitonic", True)):
                def run(flag=flag):
                    merge_topk.BITONIC = flag
                    with torch.no_grad():
                        return linear_topk_logprobs(h, w, k, temperature=T)
                fns[name] = run
                outs[name] = run()
            rec["same"] = torch.equal(outs["extract"].topk_ids, outs["bitonic"].topk_ids) and \
                torch.equal(outs["extract"].topk_log_probs, outs["bitonic"].topk_log_probs)
            del outs
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
            from torch.profiler import ProfilerActivity, profile
            for name in ("extract", "bitonic"):
                fns[name]()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        fns[name]()
                    torch.cuda.synchronize()
                rec.setdefault("profile_ms_a_call", {})[name] = {
                    e.key[:60]: round((getattr(e, "device_time_total", 0) or 0) / 3000.0, 4)
                    for e in prof.key_averages() if (getattr(e, "device_time_total", 0) or 0)}
            merge_topk.BITONIC = hasattr(__import__("triton").language, "topk")
            print(json.dumps(rec), flush=True)
            results.append(rec)
        json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
