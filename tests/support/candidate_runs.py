"""The rescan's candidates as topk_rescan.py leaves them: k ordered runs a row.

Run j (0-based) holds at most k - j candidates at j k - j (j - 1) / 2, largest value
first, equal values (-0.0 and +0.0 alike) to the lower id, then unfilled slots (-inf,
vocab). Used by the interpreter's ``mergeruns`` case and the GPU's
``test_merge_runs_matches_merge_topk`` (merge_runs.py against merge_topk.py).
"""
from __future__ import annotations

import torch

ID_STRIDE = 7919  # a prime: a row's ids offset + slot * ID_STRIDE mod vocab differ


def candidate_runs(n: int, k: int, vocab: int, generator: torch.Generator):
    """(values [n, k (k + 1) / 2] fp32, ids int32, nan_rows [n] bool) on the generator's
    device: each row's k runs of random lengths (run 0 at least one candidate; the first
    row every slot filled), distinct ids < ``vocab`` (k (k + 1) / 2 <= vocab, vocab not a
    multiple of ID_STRIDE), values from a few halves (many ties across runs), -0.0 beside
    +0.0 and real -inf values; one row in eight all NaN (an invalid temperature's)."""
    dev = generator.device
    width = k * (k + 1) // 2
    assert width <= vocab and vocab % ID_STRIDE, (width, vocab)

    def rand(*shape):
        return torch.rand(*shape, generator=generator, device=dev)

    slot = torch.randperm(width, generator=generator, device=dev)
    offset = torch.randint(0, vocab, (n, 1), generator=generator, device=dev)
    ids = (offset + slot * ID_STRIDE) % vocab
    values = (torch.randint(-3, 4, (n, width), generator=generator, device=dev) / 2).float()
    values = torch.where((values == 0) & (rand(n, width) < 0.5), -0.0, values)
    values = torch.where(rand(n, width) < 0.1, float("-inf"), values)
    for j in range(k):
        start, room = j * k - j * (j - 1) // 2, k - j
        cols = slice(start, start + room)
        fill = torch.randint(int(j == 0), room + 1, (n, 1), generator=generator, device=dev)
        fill[0] = room
        unfilled = torch.arange(room, device=dev) >= fill
        v = torch.where(unfilled, float("-inf"), values[:, cols])
        i = torch.where(unfilled, vocab, ids[:, cols])
        # the contract's order: by id, then stably by value descending (-0.0 == +0.0)
        by_id = i.argsort(dim=1, stable=True)
        v, i = v.gather(1, by_id), i.gather(1, by_id)
        by_value = v.argsort(dim=1, descending=True, stable=True)
        values[:, cols], ids[:, cols] = v.gather(1, by_value), i.gather(1, by_value)
    nan_rows = torch.arange(n, device=dev) % 8 == 5
    values = torch.where(nan_rows[:, None] & (ids < vocab), float("nan"), values)
    return values, ids.int(), nan_rows
