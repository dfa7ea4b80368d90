"""Pass 14, fifth call: the forward kernels' label logit taken only in tiles that hold a
row's label (_online_stats.label_logit) against the package before it (BASE/
megatron_overlay_base): the same bits? The forward statistics (log-prob forward, top-k
with labels) at the benchmark's shapes, labels with ignored rows, scalar and per-row T.

    PYTHONPATH=. python docs/h200/pass14/label_guard.py BASE          (one GPU)
"""
import sys

import torch

sys.path.insert(0, sys.argv[1])
from megatron_overlay.ops.kernels import triton_impl as new, triton_topk as new_topk  # noqa
from megatron_overlay_base.ops.kernels import triton_impl as old, triton_topk as old_topk  # noqa
from tools.bench.inputs import distill_inputs  # noqa: E402


def same(a, b):
    a, b = [x.view(torch.int32) if x.dtype == torch.float32 else x for x in (a, b)]
    return bool(torch.equal(a, b))


for n, h, v in ((8192, 4096, 151936), (16384, 3584, 152064)):
    hid, w, ids = distill_inputs(n, h, v, 1, 0)
    labels = ids[:, 0].clone()
    labels[::7] = -1  # not in this shard / ignored
    g = torch.Generator(device="cuda").manual_seed(1)
    per_row = 0.5 + torch.rand(n, device="cuda", generator=g)
    for t in (1 / 0.7, per_row):
        for ent in (True, False):
            ok = same(new.forward_stats(hid, w, labels, t, ent),
                      old.forward_stats(hid, w, labels, t, ent))
            ok_k = all(same(a, b) for a, b in zip(
                new_topk.topk_stats(hid, w, labels, t, ent, 8),
                old_topk.topk_stats(hid, w, labels, t, ent, 8)))
            print(f"N={n} T={"per-row" if t is per_row else round(t, 4)} entropy={ent}: "
                  f"forward_stats same bits {ok}, topk_stats (k = 8, labels) {ok_k}",
                  flush=True)
    del hid, w
    torch.cuda.empty_cache()
