"""The reference of tile_sort's runs table (ops/kernels/tile_sort.py), in torch."""

import torch


def runs_reference(tile_ids: torch.Tensor, num_t: int, seg_rows: int, bins: int) -> torch.Tensor:
    """[2, bins] int32: the segments of at most ``seg_rows`` pairs of tiles 0..t
    (cumulative), and the place of tile t's first pair in the stable order by tile, of
    the pairs' tile ids (>= num_t: unfilled, counted as num_t)."""
    counts = torch.bincount(tile_ids.reshape(-1).clamp(max=num_t).cpu(), minlength=bins)
    segments = (counts + seg_rows - 1) // seg_rows
    return torch.stack([segments.cumsum(0), counts.cumsum(0) - counts]).int()
