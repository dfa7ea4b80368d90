"""The host cost of each primitive a call is made of, and of the alternatives to each
(issue 20's host targets: which change would pay, measured before it is made).

Each primitive runs REPS times back to back behind ~BUSY_MS of queued GEMMs (so nothing
waits for the GPU: what is timed is host work), median of 5 blocks, in us a call.
Pairs to compare (the current form first):
- the label check's event: ``Event.record()`` (torch builds a Stream object for the
  current stream) / ``record(stream)`` with the Stream object kept / the raw current
  stream's id (``torch._C._cuda_getCurrentStream``), which would tell when to rebuild it;
  ``Event.query()``; ``is_current_stream_capturing()`` (``label_check._capturing``);
- the poll's read of a finished record: ``_raise_if_bad`` on the pinned tensor / a numpy
  view of the pooled buffer made once;
- allocations: 4 and 13 ``torch.empty`` (a log-prob / a top-k k = 32 forward's) / one
  ``torch.empty`` carved into as many typed views;
- a launch's Python before the C launcher: ``launch._specialization`` of the forward
  kernel's arguments, ``TensorDescriptor.from_tensor`` (two a forward call),
  ``driver.active`` lookups;
- a cached Triton launch of a small kernel: pointer arguments / two TMA descriptors (the
  C launcher encodes a CUtensorMap for each, every launch).

    PYTHONPATH=. python docs/h200/pass12/host_primitives.py OUT.json     (CUDA)
    PYTHONPATH=. python docs/h200/pass12/host_primitives.py --cpu        (the CPU-side rows)
"""
import json
import statistics
import sys
import time

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import driver
from triton.tools.tensor_descriptor import TensorDescriptor

from megatron_overlay.ops import label_check
from megatron_overlay.ops.kernels import launch as launch_mod

REPS, BLOCKS, BUSY_MS = 200, 5, 150
CPU = "--cpu" in sys.argv
DEV = "cpu" if CPU else "cuda"


def busy(gemm):
    """Queue ~BUSY_MS of GEMMs so that what follows is not waiting for the GPU."""
    if CPU:
        return
    a, b, ms = gemm
    for _ in range(max(1, int(BUSY_MS / ms))):
        a @ b


def per_call_us(fn, gemm, reps=REPS, behind=True):
    """``behind=False``: not behind queued GEMMs (the label check's lease: its records
    must finish between calls, or the pending queue fills and waits)."""
    blocks = []
    for _ in range(BLOCKS):
        if behind:
            busy(gemm)
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        blocks.append((time.perf_counter() - t) / reps * 1e6)
        if not CPU:
            torch.cuda.synchronize()
    return round(statistics.median(blocks), 2)


def gemm_for_busy():
    if CPU:
        return None
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    a @ a
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    return a, a, (time.perf_counter() - t) / 10 * 1e3


def carve(buf, parts):
    """One byte buffer as typed views (a workspace): [(numel, dtype), ...]."""
    out, at = [], 0
    for numel, dtype in parts:
        size = numel * dtype.itemsize
        at = -(-at // 16) * 16
        out.append(buf[at:at + size].view(dtype))
        at += size
    return out


@triton.jit
def _copy_rows(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


@triton.jit
def _touch_desc(h_desc, w_desc, out, BLOCK: tl.constexpr):
    # reads one tile through each descriptor (the launcher fills both)
    a = h_desc.load([0, 0])
    b = w_desc.load([0, 0])
    tl.store(out + tl.arange(0, BLOCK), tl.sum(a, axis=1) + tl.sum(b, axis=1))


def main():
    gemm = gemm_for_busy()
    rows = {}
    n = 256

    def row(name, fn, reps=REPS, behind=True):
        rows[name] = per_call_us(fn, gemm, reps, behind)
        print(f"{name:72s} {rows[name]:8.2f} us", flush=True)

    # the label check's record: pinned on CUDA, as host_record lends it
    rec = torch.zeros(1, 4, dtype=torch.int64, pin_memory=not CPU)
    view = rec.numpy()
    message = lambda *a, **k: "bad"  # noqa: E731
    row("_raise_if_bad(pinned [1, 4] tensor)  (poll's read, now)",
        lambda: label_check._raise_if_bad(rec, message))
    row("numpy view kept: view[:, 0].any()", lambda: view[:, 0].any())
    row("rec.numpy() (a view made each time)", lambda: rec.numpy())
    if not CPU:
        ev = torch.cuda.Event()
        stream = torch.cuda.current_stream()
        idx = torch.cuda.current_device()
        row("Event.record()  (now)", lambda: ev.record())
        row("Event.record(stream), the Stream kept", lambda: ev.record(stream))
        row("torch.cuda.current_stream()", lambda: torch.cuda.current_stream())
        row("torch._C._cuda_getCurrentStream(idx)", lambda: torch._C._cuda_getCurrentStream(idx))
        row("Event.query()", lambda: ev.query())
        row("torch.cuda.is_current_stream_capturing()",
            lambda: torch.cuda.is_current_stream_capturing())
        row("label_check._capturing()  (now)", lambda: label_check._capturing())

        def lease():
            label_check._defer(label_check.host_record(2, torch.device("cuda")), message)
            label_check.poll()
        label_check.check_labels()
        row("host_record + _defer + poll (one call's check; GPU idle: each poll reads "
            "the previous call's record)", lease, behind=False)
        label_check.check_labels()

    # allocations
    for count, label in ((4, "a log-prob forward's"), (13, "a top-k k = 32 forward's")):
        parts = [(n * 4, torch.float32)] * (count // 2) + [(n * 8, torch.int32)] * (count - count // 2)
        total = sum(-(-p * d.itemsize // 16) * 16 for p, d in parts)
        row(f"{count} x torch.empty ({label})",
            lambda parts=parts: [torch.empty(p, dtype=d, device=DEV) for p, d in parts])
        row(f"1 x torch.empty + {count} typed views",
            lambda parts=parts, total=total: carve(torch.empty(total, dtype=torch.uint8,
                                                               device=DEV), parts))

    row("torch.empty(2, N).unbind(0) (finalize's pairs)",
        lambda: torch.empty(2, n, dtype=torch.float32, device=DEV).unbind(0))

    # a launch's Python before the C launcher
    h = torch.randn(n, 4096, dtype=torch.bfloat16, device=DEV)
    w = torch.randn(151936, 4096, dtype=torch.bfloat16, device=DEV)
    labels = torch.zeros(n, dtype=torch.int64, device=DEV)
    part = torch.empty(8, n, 4, dtype=torch.float32, device=DEV)
    hd, wd = TensorDescriptor.from_tensor(h, [128, 64]), TensorDescriptor.from_tensor(w, [256, 64])
    args = (hd, None, wd, None, labels, part, None, n, 151936, 4096, 4096, 4096, 1 / 0.7, 66,
            9, 8)
    row("launch._specialization(forward kernel's 16 arguments)",
        lambda: launch_mod._specialization(args))
    row("TensorDescriptor.from_tensor(weight, [256, 64])",
        lambda: TensorDescriptor.from_tensor(w, [256, 64]))
    if not CPU:
        dev = driver.active.get_current_device()
        row("driver.active.get_current_device()", lambda: driver.active.get_current_device())
        row("driver.active.get_current_stream(dev)",
            lambda: driver.active.get_current_stream(dev))
        src = torch.zeros(n, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        launch_mod.launch(_copy_rows, (2,), src, dst, n, BLOCK=128)
        # launches not behind the GEMMs: ~900 queued GEMMs and these 200 kernels fill
        # CUDA's launch queue, and each launch then waits for a slot (2026-12-05, H100:
        # 95-99 us for any of them); a tiny kernel on an idle GPU keeps up with the host
        row("cached launch, 3 pointer / int arguments",
            lambda: launch_mod.launch(_copy_rows, (2,), src, dst, n, BLOCK=128), behind=False)
        row("kernel[grid](...) (Triton's own path), same kernel",
            lambda: _copy_rows[(2,)](src, dst, n, BLOCK=128), behind=False)
        hd64 = TensorDescriptor.from_tensor(h, [64, 64])
        wd64 = TensorDescriptor.from_tensor(w, [64, 64])
        out = torch.empty(64, dtype=torch.bfloat16, device="cuda")
        launch_mod.launch(_touch_desc, (1,), hd64, wd64, out, BLOCK=64)
        row("cached launch, 2 TMA descriptors (encoded by the launcher each call)",
            lambda: launch_mod.launch(_touch_desc, (1,), hd64, wd64, out, BLOCK=64),
            behind=False)
        row("cached launch, 2 new TMA descriptors (from_tensor each call, as the stages do)",
            lambda: launch_mod.launch(_touch_desc, (1,), TensorDescriptor.from_tensor(h, [64, 64]),
                                      TensorDescriptor.from_tensor(w, [64, 64]), out, BLOCK=64),
            behind=False)
        torch.cuda.synchronize()
    meta = {"device": torch.cuda.get_device_name() if not CPU else "cpu",
            "torch": torch.__version__, "triton": triton.__version__, "reps": REPS,
            "blocks": BLOCKS}
    path = next((a for a in sys.argv[1:] if a.endswith(".json")), None)
    if path:
        with open(path, "w") as f:
            json.dump({**meta, "us_a_call": rows}, f, indent=1)


if __name__ == "__main__":
    main()
