"""Peak memory of a block of code, two ways.

:class:`PeakTensorMemory`: the peak of the bytes torch's allocator has handed out, above
the start: on CUDA its statistics (``max_memory_allocated``), on CPU the allocations and
frees torch's profiler records from the CPU allocator. It depends only on the code in the
block, so it repeats exactly from run to run; use it to compare two code paths.

:class:`PeakMemory`: the CPU process's peak resident set size (VmHWM) above the start (on
CUDA, the same allocator statistics). torch's CPU allocations bypass Python's allocator, so
tracemalloc does not see them; the kernel's RSS does. Linux lets a process reset that peak
(``echo 5 > /proc/self/clear_refs``), so each block measures its own peak; where the reset
is refused, the lifetime peak (getrusage) is used and only grows. RSS also counts what the
C library's malloc kept resident from *earlier* work, and glibc's choices depend on that
history (freed heap pages are reused without raising RSS, and the mmap threshold moves up
after each large free, so the same tensor may come from the heap in one run and from a
fresh mapping in another): the same block measured after different earlier work, or with
other thread timing, reads tens to hundreds of MiB apart. Use it for what the process
really holds, in a fresh process per measurement.
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


class PeakTensorMemory(PeakMemory):
    """``with PeakTensorMemory(device) as m: ...`` then ``m.extra_bytes``: the peak of live
    allocator bytes above the start (tensors and the ops' scratch), independent of what the
    process's malloc keeps resident. On CUDA that is what PeakMemory reads; on CPU it runs
    the block under torch's profiler (slower: measure an untimed repeat)."""

    def __enter__(self):
        if self.device.type == "cuda":
            return super().__enter__()
        from torch.profiler import ProfilerActivity, profile

        self._profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._profile.__enter__()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            return super().__exit__(*exc)
        self._profile.__exit__(*exc)
        if exc[0] is None:
            self.extra_bytes = peak_of_allocations(self._profile)
        return False


def peak_of_allocations(prof) -> int:
    """The highest running total of the CPU allocator's allocations (+) and frees (-) a
    finished ``torch.profiler.profile(profile_memory=True)`` recorded, in time order."""
    from torch.autograd import DeviceType

    records = [(event.start_ns(), event.nbytes())
               for event in prof.profiler.kineto_results.events()
               if event.name() == "[memory]" and event.device_type() == DeviceType.CPU]
    live = peak = 0
    for _, nbytes in sorted(records, key=lambda record: record[0]):
        live += nbytes
        peak = max(peak, live)
    return peak
