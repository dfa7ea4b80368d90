"""The benchmark's shapes and inputs, the loss on the per-token outputs, the fp64 reference."""

from __future__ import annotations

import math

import torch

# (N tokens, H hidden, V vocab): Llama-3/Qwen2.5-7B-like output layers at 8k-32k tokens
SHAPES = [(8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)]
TEMPERATURE = 0.7
ACC_ROWS = 1024      # tokens checked against fp64 (the reference is [ACC_ROWS, V] fp64)
ROTATE = 2           # input sets rotated between timed calls (each is larger than L2)


LOGITS = ("iid", "zipf", "peaked")
LABELS = ("uniform", "sampled")


def make_inputs(n, hdim, v, seed, device="cuda", dtype=torch.bfloat16, logits="iid",
                labels="uniform", temperature=TEMPERATURE):
    """ROTATE (hidden [n, hdim], labels [n]) sets and one weight [v, hdim].

    ``logits``: "iid" (the default): every logit ~ N(0, 1.4^2), std ~2 at T = 0.7, a far
    from uniform softmax but with no token favoured over another; what every table so far
    used. "zipf": a language model's unigram skew on top of that: hidden[:, 0] = 1 and
    weight[:, 0] = -T ln(1 + rank) for a random ranking of the vocabulary, so that the
    softmax at T follows 1 / (1 + rank) times the iid part (std 0.5 there); most of the
    vocabulary then carries negligible probability, as in real output layers. Kernels
    that skip negligible blocks (cut-cross-entropy's backward) run faster on it; for the
    others only the power drawn may change. "peaked": iid of std 4 (a teacher's softmax, as
    distill_inputs'; "flat" is iid).

    ``labels``: "uniform" (the default) or "sampled" from the exact softmax at
    ``temperature``, as rollout tokens are (the log-probs an RL loss reads)."""
    if logits not in LOGITS or labels not in LABELS:
        raise ValueError(f"logits must be one of {LOGITS} and labels one of {LABELS}, got "
                         f"{logits!r}, {labels!r}")
    g = torch.Generator(device=device).manual_seed(seed)
    sets = []
    for _ in range(ROTATE):
        h = torch.randn(n, hdim, device=device, dtype=dtype, generator=g)
        if logits == "zipf":
            h[:, 0] = 1.0
        y = torch.randint(0, v, (n,), device=device, generator=g)
        sets.append((h, y))
    std = {"iid": 1.4, "zipf": 0.5 * temperature, "peaked": 4.0}[logits]
    w = torch.randn(v, hdim, device=device, dtype=torch.float32, generator=g) * (std / math.sqrt(hdim))
    if logits == "zipf":
        rank = torch.randperm(v, device=device, generator=g).float()
        w[:, 0] = -temperature * torch.log1p(rank)
    w = w.to(dtype)
    if labels == "sampled":
        sets = [(h, sampled_labels(h, w, temperature, g)) for h, _ in sets]
    return sets, w


def sampled_labels(h, w, temperature, generator, rows=2048):
    """One token per row drawn from softmax(h @ w.T / temperature), fp32, ``rows`` at a time."""
    w32 = w.float()
    return torch.cat([torch.multinomial(torch.softmax(
        (h[i:i + rows].float() @ w32.T) / temperature, -1), 1, generator=generator)[:, 0]
        for i in range(0, h.shape[0], rows)])


def fp32_copy(t, seed):
    """An fp32 tensor near bf16 ``t`` that is not bf16-exact (an fp32 residual stream or
    head weight): t * (1 + 2^-9 e), e ~ N(0, 1)."""
    g = torch.Generator(device=t.device).manual_seed(seed)
    return t.float() * (1 + 2 ** -9 * torch.randn(t.shape, device=t.device, generator=g))


def distill_inputs(n, h, v, k, seed, device="cuda"):
    """(hidden [n, h], weight [v, h], ids [n, k]) bf16 of the distillation benchmark: logits
    of std ~4 (before T), a peaked softmax as a teacher's."""
    gen = torch.Generator(device=device).manual_seed(seed)
    hidden = torch.randn(n, h, device=device, generator=gen).bfloat16()
    weight = (torch.randn(v, h, device=device, generator=gen) * h ** -0.5 * 4).bfloat16()
    ids = torch.randint(0, v, (n, k), device=device, generator=gen)
    return hidden, weight, ids


def op_phases(sets, w, a, b):
    """The op's two phases: (name, each call's inputs, grad mode): forward (h, w, y) without
    grad, forward+backward (h, w, y, a, b) with it."""
    return (("fwd", [(h, w, y) for h, y in sets], torch.no_grad),
            ("fb", [(h, w, y, a, b) for h, y in sets], torch.enable_grad))


def shape(text: str) -> tuple[int, ...]:
    """"8192,4096,151936" -> (8192, 4096, 151936)."""
    return tuple(int(x) for x in text.split(","))


def loss_coeffs(n, device, seed=1):
    """(a, b) [n]: the fb loss is sum(a * logprob + b * entropy), as an RL loss weights them."""
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(n, device=device, generator=g) / n,
            torch.randn(n, device=device, generator=g) / n)


def fp64_reference(h, w, y, rows, temperature=TEMPERATURE):
    z = (h[:rows].double() @ w.double().T) / temperature
    logp = torch.log_softmax(z, dim=-1)
    lp = logp.gather(1, y[:rows, None]).squeeze(1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


def fp32_grads(h, w, y, a, b, temperature=TEMPERATURE):
    """(d_hidden, d_weight) fp32 of sum(a * logprob + b * entropy) by autograd on fp32
    copies of the (bf16) inputs: the reference of the gradient checks."""
    h32, w32 = h.float().requires_grad_(), w.float().requires_grad_()
    logp = torch.log_softmax((h32 @ w32.T) / temperature, -1)
    lp = logp.gather(1, y[:, None]).squeeze(1)
    ent = -(logp.exp() * logp).sum(-1)
    ((lp * a).sum() + (ent * b).sum()).backward()
    return h32.grad, w32.grad


def max_err(out, ref):
    if out is None:
        return None
    return (out[:ref.shape[0]].double() - ref).abs().max().item()
