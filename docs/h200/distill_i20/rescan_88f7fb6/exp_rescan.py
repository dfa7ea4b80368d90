"""GPU: the rescan kernel's time by rows a program / warps / stages (torch.profiler), and
the op's outputs the same across them."""
import torch
from torch.profiler import profile, ProfilerActivity
from megatron_overlay import ops
from megatron_overlay.ops.kernels import topk_rescan as tr
VARIANTS = [(64, 8, 3), (128, 8, 3), (64, 8, 4), (64, 4, 3), (128, 8, 2)]
for n, h, v in [(8192, 4096, 151936), (32768, 4096, 151936)]:
    hid = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(v, h, device="cuda") * (4 / h ** 0.5)).to(torch.bfloat16)
    tr.RESCAN_BUDGET_BYTES = 512 << 20
    for k in (8, 32):
        ref = None
        for rows, warps, stages in VARIANTS:
            tr.RESCAN_ROWS, tr.RESCAN_WARPS = rows, warps
            tr.RESCAN_STAGES = stages
            out = ops.linear_topk_logprobs(hid, w, k, temperature=0.7)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(3):
                    ops.linear_topk_logprobs(hid, w, k, temperature=0.7)
                torch.cuda.synchronize()
            t = {e.key: e.device_time_total / 3000 for e in p.key_averages()}
            same = ref is None or (torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1]))
            ref = ref or out
            print(f"N={n} k={k} rows={rows} warps={warps} stages={stages}: rescan "
                  f"{t.get('rescan_kernel', 0):.3f} ms main {t.get('topk_stats_kernel', 0):.3f} "
                  f"merge {t.get('merge_topk_kernel', 0):.3f} same={same}", flush=True)
