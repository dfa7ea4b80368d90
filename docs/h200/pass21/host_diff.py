"""Pass 21: what a call enqueued behind queued GPU work spends more time on than one on an
idle GPU (r2: the log-prob forward at 256 tokens, 170 us idle against 226-232 queued on
one H100 host; a pure Python loop and the bare GEMM read the same in both states).

For the log-prob forward and the top-k (k = 8) at 256 tokens, in each state ("idle": right
after a sync; "queued": after a sync and ~30 ms of queued GEMMs), cProfile over 21 single
calls (the profiler on for the call only); each function's inclusive and own us a call,
and the functions whose time differs most between the states.

    PYTHONPATH=. python docs/h200/pass21/host_diff.py OUT_DIR     (one GPU)
"""
import cProfile
import json
import pstats
import sys
from pathlib import Path

import torch

from megatron_overlay import ops
from tools.bench.inputs import distill_inputs

N, H, V, REPS = 256, 4096, 151936, 21


def table(prof):
    rows = {}
    for (file, line, fn), (cc, nc, tt, ct, _) in pstats.Stats(prof).stats.items():
        where = f"{Path(file).name}:{line}({fn})" if file != "~" else fn
        rows[where[:90]] = (nc / REPS, tt / REPS * 1e6, ct / REPS * 1e6)
    return rows


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    h, w, ids = distill_inputs(N, H, V, 8, 0)
    labels = ids[:, 0].contiguous()
    hb = distill_inputs(1024, H, V, 1, 1)[0]
    fns = {"logprob_fwd": lambda: ops.linear_logprob_entropy(h, w, labels, temperature=0.7),
           "topk_fwd_k8": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7)}

    def queue():
        for _ in range(15):
            torch.matmul(hb, w.T)

    res, lines = {}, []
    with torch.no_grad():
        for name, fn in fns.items():
            for _ in range(3):
                fn()
            got = {}
            for state, before in (("idle", lambda: None), ("queued", queue)):
                prof = cProfile.Profile()
                for _ in range(REPS):
                    torch.cuda.synchronize()
                    before()
                    prof.enable()
                    fn()
                    prof.disable()
                torch.cuda.synchronize()
                got[state] = table(prof)
            res[name] = got
            keys = set(got["idle"]) | set(got["queued"])
            diff = sorted(keys, key=lambda k: -abs(got["queued"].get(k, (0, 0, 0))[1]
                                                   - got["idle"].get(k, (0, 0, 0))[1]))
            total = {s: sum(v[1] for v in got[s].values()) for s in got}
            lines.append(f"== {name}: profiled own time a call idle {total['idle']:.1f} us, "
                         f"queued {total['queued']:.1f} us; by the difference of own time:")
            lines.append(f"{'calls':>6} {'own idle':>9} {'own queued':>10} {'incl idle':>9} "
                         f"{'incl queued':>11}  function")
            for k in diff[:30]:
                i, q = got["idle"].get(k, (0, 0, 0)), got["queued"].get(k, (0, 0, 0))
                lines.append(f"{q[0]:6.1f} {i[1]:9.1f} {q[1]:10.1f} {i[2]:9.1f} {q[2]:11.1f}  {k}")
            print("\n".join(lines[-32:]), flush=True)
    (out / "host_diff.json").write_text(json.dumps(res, indent=1))
    (out / "host_diff.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
