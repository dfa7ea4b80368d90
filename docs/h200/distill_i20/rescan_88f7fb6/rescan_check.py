"""GPU: new top-k (tile candidates + rescan) against base (77203a2) and torch, bit for bit."""
import sys, torch, importlib
sys.path.insert(0, ".scratch/base77")
from tools.bench.methods import import_baseline
from pathlib import Path
base = importlib.import_module(import_baseline(Path(".scratch/base77")) + ".ops")
from megatron_overlay import ops
torch.manual_seed(0)
for (n, h, v) in [(1000, 4096, 151936), (256, 1024, 32000), (8192, 4096, 151936)]:
    hid = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(v, h, device="cuda") * (4 / h ** 0.5)).to(torch.bfloat16)
    w[v - 1] = w[5]  # a tie
    for k in (1, 8, 32):
        a = ops.linear_topk_logprobs(hid, w, k, temperature=0.7)
        b = base.linear_topk_logprobs(hid, w, k, temperature=0.7)
        va, ia = a.topk_log_probs, a.topk_ids
        vb, ib = b.topk_log_probs, b.topk_ids
        rows = slice(0, 64)
        ref = torch.log_softmax((hid[rows].float() @ w.float().T) / 0.7, -1).topk(k)
        print(f"N={n} H={h} V={v} k={k}: ids==base {torch.equal(ia, ib)} values==base "
              f"{torch.equal(va, vb)} maxdiff {(va - vb).abs().max().item():.3g} "
              f"ids==fp32 ref(64 rows) {(ia[rows] == ref.indices).float().mean().item():.4f} "
              f"err {(va[rows] - ref.values).abs().max().item():.3g}", flush=True)
