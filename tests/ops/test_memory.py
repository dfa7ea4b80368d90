"""PeakTensorMemory: the allocator's peak above the start, whatever came before."""

from __future__ import annotations

import torch

from megatron_overlay.utils.memory import PeakTensorMemory

MIB = 2 ** 20


def _block():
    """Peak 96 MiB above the start: 64 MiB live while 32 more are made, then all freed."""
    big = torch.empty(16 * MIB, dtype=torch.float32)  # 64 MiB
    more = torch.ones(8 * MIB, dtype=torch.float32)  # 32 MiB
    total = big.numel() + more.sum()
    del big, more
    small = torch.empty(MIB, dtype=torch.float32)  # 4 MiB, after the peak
    return total, small


def test_peak_counts_what_was_freed_before_the_end():
    with PeakTensorMemory("cpu") as peak:
        _block()
    assert 96 * MIB <= peak.extra_bytes < 97 * MIB


def test_the_same_block_reads_the_same_after_any_history():
    """Unlike PeakMemory's RSS, which reads 32-36 MiB for this 96 MiB peak and varies with
    the holes: untouched pages are not resident, and freed ones are reused."""
    readings = []
    for round_index in range(3):
        keep = [torch.empty((round_index + 1) * 7 * MIB // 4, dtype=torch.uint8)
                for _ in range(5)]
        del keep[::2]  # holes of odd sizes, as a model's earlier steps leave
        with PeakTensorMemory("cpu") as peak:
            _block()
        readings.append(peak.extra_bytes)
    assert len(set(readings)) == 1, readings


def test_tensors_alive_at_the_start_are_not_counted():
    base = torch.empty(32 * MIB, dtype=torch.uint8)
    with PeakTensorMemory("cpu") as peak:
        extra = torch.empty(MIB, dtype=torch.uint8)
    assert MIB <= peak.extra_bytes < 2 * MIB
    del base, extra
