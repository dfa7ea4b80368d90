"""Pass 14, second call: the tree with the top-k's new split policy (the log-prob
forward's splits) and the second maxima from k = 8 in small launches.

1. Where small launches should stop storing the second maxima at k = 8 and 16
   (SECOND_MAX_SMALL_TOKENS): the whole op with them (threshold 10^9) and without (0) at
   N = 256 to 8192, x the GEMM timed beside it, bursts / synchronized, and their values
   and ids bitwise equal.
2. The whole op at the issue's three shapes, k = 1, 8, 32 (a preview; the README's table
   comes from tools.bench).
3. CUDA time by kernel of one default call at 16384 tokens, k = 8 and 32 (where k = 32
   was still above 1.15x in pass 14's first call).

    PYTHONPATH=. python docs/h200/pass14/topk_threshold.py OUT.json       (one GPU)
"""
import json
import sys

import torch

from megatron_overlay.ops.kernels import topk_forward
from tools.bench.inputs import distill_inputs

sys.path.insert(0, "docs/h200/pass14")
from topk_splits import ms_per_call, profile, topk  # noqa: E402


def ratio(h, w, k, floor):
    fn = lambda: topk(h, w, k)  # noqa: E731
    fn()
    return ms_per_call(fn, False) / floor[False], ms_per_call(fn, True) / floor[True]


def main(path):
    out = {"device": torch.cuda.get_device_name(), "threshold": [], "shapes": [],
           "profiles": []}
    default = topk_forward.SECOND_MAX_SMALL_TOKENS
    for n in (256, 1024, 2048, 4096, 8192):
        h, w, _ = distill_inputs(n, 4096, 151936, 1, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        floor = {s: ms_per_call(gemm, s) for s in (False, True)}
        for k in (8, 16):
            got = {}
            for name, tokens in (("with", 10 ** 9), ("without", 0)):
                topk_forward.SECOND_MAX_SMALL_TOKENS = tokens
                got[name] = (topk(h, w, k), ratio(h, w, k, floor))
            topk_forward.SECOND_MAX_SMALL_TOKENS = default
            (a, ra), (b, rb) = got["with"], got["without"]
            same = bool(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))
            row = {"N": n, "k": k, "with": ra, "without": rb, "equal": same}
            out["threshold"].append(row)
            print(f"N={n:5d} k={k:2d} second maxima: with {ra[0]:.3f} / {ra[1]:.3f}, "
                  f"without {rb[0]:.3f} / {rb[1]:.3f} x GEMM, equal={same}", flush=True)
        del h, w
    for n, hd, v in ((8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)):
        h, w, _ = distill_inputs(n, hd, v, 1, 0)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        floor = {s: ms_per_call(gemm, s) for s in (False, True)}
        for k in (1, 8, 32):
            r = ratio(h, w, k, floor)
            out["shapes"].append({"N": n, "H": hd, "V": v, "k": k, "x_gemm": r,
                                  "gemm_ms": floor})
            print(f"N={n:5d} k={k:2d}: {r[0]:.3f} / {r[1]:.3f} x GEMM "
                  f"({floor[False]:.2f} ms)", flush=True)
        if n == 16384:
            for k in (8, 32):
                prof = profile(h, w, k)
                out["profiles"].append({"N": n, "k": k, "ms_per_call": prof})
                print(f"profile N={n} k={k}:", json.dumps(prof), flush=True)
        del h, w
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
