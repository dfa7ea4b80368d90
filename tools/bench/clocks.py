"""SM clock and board power, sampled in a background thread while the GPU works.

The H200 runs at its 700 W board limit under a dense bf16 GEMM and lowers its SM clock to
stay there; lighter kernels run at higher clocks. A method's time therefore depends on what
ran just before it and on how long the GPU idled, which is why every timing in this
package reports the clock it ran at. Sampling from a thread keeps the timed loop free of
NVML calls (the old tool polled NVML between launches, which also left the GPU idle).
"""

from __future__ import annotations

import bisect
import statistics
import threading
import time


def _nvml_handle(pynvml, device_index: int):
    """NVML's handle of CUDA device ``device_index``: by its UUID, as NVML's own indices
    ignore CUDA_VISIBLE_DEVICES (with CUDA_VISIBLE_DEVICES=3, CUDA's device 0 is NVML's 3)."""
    import torch
    uuid = str(torch.cuda.get_device_properties(device_index).uuid)
    return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


class ClockSampler:
    """Samples (host time, SM MHz, watts) every ``period_s``; ``window(t0, t1)`` gives the
    medians of the samples taken in that host-time window, or None without NVML."""

    def __init__(self, device_index: int = 0, period_s: float = 0.002):
        self.samples: list[tuple[float, float, float]] = []
        self._times: list[float] = []  # the samples' host times, for bisect
        self._stop = threading.Event()
        self._thread = None
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = _nvml_handle(pynvml, device_index)
            self._read = lambda: (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                                  pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            self._read()
        except Exception:  # no NVML: timings still work, without clocks
            self._read = None
        self.period_s = period_s

    @property
    def available(self) -> bool:
        return self._read is not None

    def read_now(self):
        """(SM MHz, W) right now, or None without NVML."""
        return self._read() if self._read is not None else None

    def __enter__(self):
        if self._read is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            mhz, watts = self._read()
            now = time.perf_counter()
            self.samples.append((now, mhz, watts))
            self._times.append(now)
            time.sleep(self.period_s)

    def window(self, t0: float, t1: float):
        """(median SM MHz, median W) of the samples in [t0, t1], or None."""
        # appended in time order (the sample first, so every time has its sample)
        lo, hi = bisect.bisect_left(self._times, t0), bisect.bisect_right(self._times, t1)
        got = self.samples[lo:hi]
        if not got:
            return None
        return statistics.median(s[1] for s in got), statistics.median(s[2] for s in got)
