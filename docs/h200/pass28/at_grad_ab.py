"""Pass 28: at ids' and the top-k's d_hidden in the hidden states' dtype from the stage
(as the log-prob op's), against 0026e3f's fp32 d_hidden and cast; one process.

"base": 0026e3f's package as ``megatron_overlay_base`` (host_ab.py); "new": this tree.
For the fwd+bwd of at ids (k = 8), the top-k (k = 8) and the log-prob op (unchanged, the
control), bf16, H = 4096, V = 151936, T = 0.7, the loss the sum of the outputs:

1. accuracy at N = 256 and 1029: each gradient's max |error| / max |reference| against
   fp64 (the logits, softmax and gradient of the same loss in float64, the top-k's ids
   fixed as the op chose them), base and new, and whether the two are the same bits;
2. peak memory at N = 8192: the call's peak allocated beyond what was allocated before
   it, MiB, base and new;
3. time at N = 256 (host_ab.timing: synchronized calls, host time; base / new alternated).

    PYTHONPATH=.:BASE python docs/h200/pass28/at_grad_ab.py OUT.json      (one GPU)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import host_ab  # noqa: E402

from tools.bench.inputs import distill_inputs  # noqa: E402

H, V, T = 4096, 151936, 0.7
OPS = ("at8_fb", "topk8_fb", "logprob_fb")


def reference(h, w, ids, labels, name, topk_ids):
    """fp64 gradients (d_hidden, d_weight) of the op's loss."""
    hh = h.double().requires_grad_(True)
    ww = w.double().requires_grad_(True)
    logp = torch.log_softmax((hh @ ww.T) / T, dim=-1)
    if name == "at8_fb":
        loss = logp.gather(1, ids[:, :8]).sum()
    elif name == "topk8_fb":
        loss = logp.gather(1, topk_ids).sum()
    else:
        p = logp.exp()
        loss = logp.gather(1, labels[:, None]).sum() - (p * logp).sum()
    dh, dw = torch.autograd.grad(loss, (hh, ww))
    return dh, dw


def accuracy():
    rows = []
    for n in (256, 1029):
        h, w, ids = distill_inputs(n, H, V, 32, 2)
        labels = ids[:, 0].contiguous()
        sides = {"base": host_ab.op_calls(host_ab.base_ops, h, w, ids),
                 "new": host_ab.op_calls(host_ab.new_ops, h, w, ids)}
        for name in OPS:
            outs = {side: calls[name]() for side, calls in sides.items()}
            topk_ids = outs["new"][0] if name == "topk8_fb" else None
            ref = reference(h, w, ids, labels, name, topk_ids)
            row = {"N": n, "op": name}
            for side, out in outs.items():
                grads = out[-2:]
                row[side] = [((g.double() - r).abs().max() / r.abs().max()).item()
                             for g, r in zip(grads, ref)]
                row[side + "_dtypes"] = [str(g.dtype) for g in grads]
            row["same_bits"] = [host_ab.same_bits(a, b) for a, b in
                                zip(outs["base"][-2:], outs["new"][-2:])]
            rows.append(row)
            print(f"accuracy N={n} {name}: d_hidden / d_weight max err / max |ref|, base "
                  f"{row['base'][0]:.2e} / {row['base'][1]:.2e}, new {row['new'][0]:.2e} / "
                  f"{row['new'][1]:.2e}; dtypes {row['new_dtypes']}; same bits "
                  f"{row['same_bits']}", flush=True)
            del outs, ref
    return rows


def memory():
    rows = []
    h, w, ids = distill_inputs(8192, H, V, 32, 3)
    sides = {"base": host_ab.op_calls(host_ab.base_ops, h, w, ids),
             "new": host_ab.op_calls(host_ab.new_ops, h, w, ids)}
    for name in OPS:
        row = {"N": 8192, "op": name}
        for side, calls in sides.items():
            calls[name]()  # warm
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            out = calls[name]()
            torch.cuda.synchronize()
            row[side] = (torch.cuda.max_memory_allocated() - before) / 2 ** 20
            del out
        rows.append(row)
        print(f"memory N=8192 {name}: peak beyond the inputs {row['base']:.1f} -> "
              f"{row['new']:.1f} MiB", flush=True)
    return rows


def main():
    import megatron_overlay_base.ops as base_ops
    import megatron_overlay_base.ops.kernels.triton_impl  # noqa: F401
    import megatron_overlay_base.ops.kernels.triton_topk  # noqa: F401
    host_ab.base_ops = base_ops
    host_ab.wrap_launches()
    result = {"accuracy": accuracy(), "memory": memory()}
    json.dump(result, open(sys.argv[1], "w"), indent=1)
    result["time"] = host_ab.timing(256)
    json.dump(result, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
