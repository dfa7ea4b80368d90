"""cProfile of single synchronized calls of the forward ops (each call after a sync, as the
synchronized protocol runs them): where a call's host time goes, by function (tottime,
the 28 largest). Usage: python cprofile_probe.py N OP [OP ...]  (logprob, at8, topk8)"""
import cProfile, io, pstats, sys
import torch
from megatron_overlay import ops
from tools.bench.inputs import distill_inputs

H, V, T = 4096, 151936, 0.7
n = int(sys.argv[1])
h, w, ids = distill_inputs(n, H, V, 8, 0)
y = ids[:, 0].contiguous()
METHODS = {
    "logprob": lambda: ops.linear_logprob_entropy(h, w, y, temperature=T),
    "at8": lambda: ops.linear_logprobs_at(h, w, ids, temperature=T),
    "topk8": lambda: ops.linear_topk_logprobs(h, w, 8, temperature=T),
}
for name in sys.argv[2:]:
    fn = METHODS[name]
    with torch.no_grad():
        for _ in range(3): fn()
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        for _ in range(100):
            torch.cuda.synchronize()
            pr.enable(); fn(); pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(28)
    print(f"== {name}, N = {n}: 100 single calls, each after a sync")
    print("\n".join(l[:160] for l in s.getvalue().splitlines()[4:40]))
    sys.stdout.flush()
