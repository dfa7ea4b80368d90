"""Logits that the temperature's scaling rounds to one z: the top-k's order is z's.

z = logit * (1 / T) in fp32. At T = 0.7 the logits 11.5 + 2^-20 and 11.5 + 2^-19 (one fp32
ulp apart) give the same z, so the contract's order (descending z, ties to the lower id)
puts the lower id first even where its logit is the smaller one. Hidden rows [1, 1,
noise...] and weight rows [11.5, 2^-20 or 2^-19, 0...] make those two logits exact sums in
bf16 and fp32 alike (whatever the summation order); a third id's logit, 12.5, is the
row's best, so that at k = 2 the tie sits at the k-th place. Every other logit is small
and exact too.
Used by the interpreter's ``scaledties-`` cases and the GPU's
``test_topk_ranks_z_not_the_raw_logits``.
"""
from __future__ import annotations

import torch

TEMPERATURE = 0.7
LOW_ID_LOGIT = (11.5, 2.0 ** -20)   # the smaller logit, at the lower id
HIGH_ID_LOGIT = (11.5, 2.0 ** -19)  # the larger one, at the higher id: the same z
BEST_LOGIT = (12.0, 0.5)


def scaled_tie_inputs(n: int, hidden_size: int, vocab: int, low: int, high: int, best: int,
                      dtype: torch.dtype, generator: torch.Generator):
    """(hidden [n, H], weight [V, H]) in ``dtype`` on the generator's device: ids ``low``
    and ``high`` tie in z at TEMPERATURE though ``high``'s logit is the larger, ``best``
    leads; every row alike but for small noise in the other logits."""
    dev = generator.device
    # dyadic noise (multiples of 1/16 and 1/32): every logit is an exact fp32 sum, so the
    # torch path and the kernels see the same logits, equal ones included
    hidden = (torch.randn(n, hidden_size, generator=generator, device=dev) * 4).round() / 16
    hidden[:, :2] = 1.0
    weight = (torch.randn(vocab, hidden_size, generator=generator, device=dev) * 8).round() / 32
    weight[:, :2] = 0.0
    for row, logit in ((low, LOW_ID_LOGIT), (high, HIGH_ID_LOGIT), (best, BEST_LOGIT)):
        weight[row] = 0.0
        weight[row, :2] = torch.tensor(logit, device=dev)
    return hidden.to(dtype), weight.to(dtype)
