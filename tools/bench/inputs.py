"""The benchmark's shapes and inputs, the loss on the per-token outputs, the fp64 reference."""

from __future__ import annotations

import math

import torch

# (N tokens, H hidden, V vocab): Llama-3/Qwen2.5-7B-like output layers at 8k-32k tokens
SHAPES = [(8192, 4096, 151936), (16384, 3584, 152064), (32768, 4096, 151936)]
TEMPERATURE = 0.7
ACC_ROWS = 1024      # tokens checked against fp64 (the reference is [ACC_ROWS, V] fp64)
ROTATE = 2           # input sets rotated between timed calls (each is larger than L2)


def make_inputs(n, hdim, v, seed, device="cuda", dtype=torch.bfloat16):
    """ROTATE (hidden [n, hdim], labels [n]) sets and one weight [v, hdim]."""
    g = torch.Generator(device=device).manual_seed(seed)
    sets = []
    for _ in range(ROTATE):
        h = torch.randn(n, hdim, device=device, dtype=dtype, generator=g)
        y = torch.randint(0, v, (n,), device=device, generator=g)
        sets.append((h, y))
    # logits std ~ 2 at T = 0.7: a realistic, far from uniform softmax
    w = (torch.randn(v, hdim, device=device, dtype=torch.float32, generator=g)
         * (1.4 / math.sqrt(hdim))).to(dtype)
    return sets, w


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


def max_err(out, ref):
    if out is None:
        return None
    return (out[:ref.shape[0]].double() - ref).abs().max().item()
