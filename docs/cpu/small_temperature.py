"""Log-prob and entropy error against fp64 at small temperatures: the torch path and the
Triton kernels under Triton's interpreter (CPU; a GPU's fused multiply-adds round otherwise).

    TRITON_INTERPRET=1 .venv/core-0.19.2/bin/python docs/cpu/small_temperature.py

fp32 operands, N = 64 rows, H = 64, V = 1000 (a partial last vocab tile), logits scaled to
a max |logit| of about 20; labels: each row's argmax (its log-prob is ~0) and a random id.
Prints, per temperature, the largest |error| in nats of each path's log-probs (argmax
labels, random labels) and entropy, and whether any output was not finite.
"""
import os

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
import torch  # noqa: E402

from megatron_overlay.ops import linear_logprob_entropy  # noqa: E402

torch.manual_seed(0)
N, H, V = 64, 64, 1000
hidden = torch.randn(N, H)
weight = torch.randn(V, H)
logits64 = hidden.double() @ weight.double().T
scale = 20.0 / logits64.abs().max().item()
hidden = hidden * scale
logits64 = hidden.double() @ weight.double().T
top = logits64.argmax(1)
rand = torch.randint(0, V, (N,))

print(f"{'T':>8} {'path':>7} {'argmax lp err':>14} {'random lp err':>14} {'entropy err':>12} "
      f"finite")
for t in (1.0, 0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10):
    logp64 = torch.log_softmax(logits64 / t, dim=1)
    ent64 = -(logp64.exp() * logp64).nan_to_num().sum(1)
    for impl in ("torch", "triton"):
        os.environ["MEGATRON_OVERLAY_IMPL"] = impl
        errs, finite = [], True
        for labels in (top, rand):
            lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=t)
            finite &= bool(lp.isfinite().all() and ent.isfinite().all())
            ref = logp64.gather(1, labels[:, None])[:, 0]
            ok = ref.isfinite()  # a random label far below the max: -inf in fp64 too
            errs.append((lp.double() - ref)[ok].abs().max().item() if ok.any() else 0.0)
        ent_err = (ent.double() - ent64).abs().max().item()
        print(f"{t:>8.0e} {impl:>7} {errs[0]:>14.3e} {errs[1]:>14.3e} {ent_err:>12.3e} {finite}")
