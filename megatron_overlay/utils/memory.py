"""Peak memory of a block of code: CUDA allocator statistics, or the process's RSS on CPU.

torch's CPU allocations bypass Python's allocator, so tracemalloc does not see them; the
kernel's peak resident set size (VmHWM) does. Linux lets a process reset that peak
(``echo 5 > /proc/self/clear_refs``), so each block measures its own peak; where the reset
is refused, the lifetime peak (getrusage) is used and only grows: then measure the smaller
workload first, or use a fresh process per measurement.
"""

from __future__ import annotations

import os
import resource

import torch


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
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
            reset_peak_rss()
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
