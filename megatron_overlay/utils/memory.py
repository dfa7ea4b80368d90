"""Peak memory of a block of code: CUDA allocator statistics, or the process's RSS on CPU.

torch's CPU allocations bypass Python's allocator, so tracemalloc does not see them; the
kernel's peak resident set size (getrusage) does. It only grows, so on CPU measure the
smaller workload first in a process, or use a fresh process per measurement.
"""

from __future__ import annotations

import os
import resource

import torch


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class PeakMemory:
    """``with PeakMemory(device) as m: ...`` then ``m.extra_bytes``: peak above the start."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.extra_bytes = 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            self._start = current_rss_bytes()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            peak = peak_rss_bytes()
        self.extra_bytes = max(0, peak - self._start)
        return False
