"""The label-range check, without a device->host sync on CUDA.

Labels outside ``[0, vocab)`` (other than ``ignore_index``) must never give a silent wrong
answer, but checking them on the host costs a sync per call (the CPU stops running ahead
of the GPU once per microbatch) and breaks ``torch.cuda.graph`` capture. So:

* CPU tensors, and *strict* mode (``strict_labels=True`` or the environment variable
  ``MEGATRON_OVERLAY_STRICT_LABELS=1``): ``check_eagerly`` raises ``ValueError`` before
  any work (one sync on CUDA).
* CUDA, default: the op computes a per-token ``bad`` mask on the device, makes those
  tokens' log-probs and their gradients NaN (so nothing downstream is silently wrong), and
  ``defer`` writes a 4-number record (count, smallest and largest bad id, first bad
  position) to pinned host memory with an asynchronous copy. The host learns of it, and
  ``ValueError`` is raised naming the labels, at the first of:
    1. the start of any later forward of the op, or the backward of any call, once the
       GPU has finished that copy (polled with ``Event.query()``: no wait);
    2. ``check_labels()``, which waits for every pending copy (call it where you sync
       anyway, e.g. where the loss is read back).
  Inside CUDA-graph capture no copy is made (a copy to the host is not replayable as a
  check); the record stays on the device and ``check_labels()`` reads the latest one of
  each captured call after a replay.

Under TP every rank holds the same labels and the same record, but each polls on its own
clock, so ranks can raise at different calls: the one that raises exits while its peers
wait in the next collective until the launcher (torchrun) stops them, as already happens
when one data-parallel rank raises. ``strict_labels=True`` checks on every rank before
any work, at the same call.
"""

from __future__ import annotations

import os
from collections import deque

import torch

STRICT_ENV = "MEGATRON_OVERLAY_STRICT_LABELS"
# Pending records at most; past it the oldest is waited for (the GPU would be this many
# op calls behind the CPU, which a training step does not reach).
MAX_PENDING = 256
_I64_MAX = torch.iinfo(torch.int64).max

_pending: deque = deque()   # (host record, event, vocab_size, ignore_index), oldest first
_captured: list = []        # (device record, vocab_size, ignore_index) made during capture


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def strict_mode(strict_labels: bool | None) -> bool:
    """``strict_labels`` if given, else ``$MEGATRON_OVERLAY_STRICT_LABELS == "1"``."""
    if strict_labels is not None:
        return bool(strict_labels)
    return os.environ.get(STRICT_ENV, "").strip() == "1"


def _message(count: int, low: int, high: int, first: int, vocab_size: int,
             ignore_index: int, deferred: bool = False) -> str:
    when = (" (found on the GPU in an earlier call of the fused log-prob op, whose "
            "log-probs for those tokens are NaN)") if deferred else ""
    return (f"labels out of range{when}: {count} label id(s) outside [0, {vocab_size}) and "
            f"not ignore_index={ignore_index} (smallest {low}, largest {high}, first at "
            f"token {first}); mask padding with ignore_index")


def check_eagerly(labels: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    """Raise ``ValueError`` now if any label is out of range (one host sync on CUDA)."""
    if not labels.numel():
        return
    record = _record(bad_labels(labels, vocab_size, ignore_index), labels)
    count, low, high, first = (int(x) for x in record.tolist())
    if count:
        raise ValueError(_message(count, low, high, first, vocab_size, ignore_index))


def bad_labels(labels: torch.Tensor, vocab_size: int, ignore_index: int) -> torch.Tensor:
    """[N] bool, on the labels' device: True where a label is out of range."""
    return (labels != ignore_index) & ((labels < 0) | (labels >= vocab_size))


def _record(bad: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[4] int64 on the device: (count, smallest bad id, largest bad id, first bad index)."""
    ids = labels.to(torch.int64)
    return torch.stack([
        bad.sum(dtype=torch.int64),
        torch.where(bad, ids, _I64_MAX).amin(),
        torch.where(bad, ids, -_I64_MAX).amax(),
        bad.to(torch.uint8).argmax().to(torch.int64),  # the first True (or 0 if none)
    ])


def defer(bad: torch.Tensor, labels: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    """Queue the device-side check of one call's labels (CUDA; no sync)."""
    if not labels.numel():
        return
    record = _record(bad, labels)
    if not record.is_cuda:  # CPU (tests): the record is already on the host
        _pending.append((record, None, vocab_size, ignore_index))
        return
    if _capturing():
        _captured.append((record, vocab_size, ignore_index))
        return
    host = torch.empty(4, dtype=torch.int64, pin_memory=True)
    host.copy_(record, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    _pending.append((host, event, vocab_size, ignore_index))
    while len(_pending) > MAX_PENDING:
        if _pending[0][1] is not None:
            _pending[0][1].synchronize()
        poll()


def poll(wait: bool = False) -> None:
    """Raise ``ValueError`` for the oldest finished record that found bad labels.

    ``wait=False`` looks only at records whose copy has finished (no sync); ``wait=True``
    waits for all of them. Records are dropped once looked at, so an error is raised once.
    """
    if not wait and _capturing():  # no event queries inside a capture
        return
    while _pending:
        host, event, vocab_size, ignore_index = _pending[0]
        if event is not None:
            if wait:
                event.synchronize()
            elif not event.query():
                return
        _pending.popleft()
        count, low, high, first = (int(x) for x in host.tolist())
        if count:
            raise ValueError(_message(count, low, high, first, vocab_size, ignore_index,
                                      deferred=True))


def check_labels() -> None:
    """Wait for every pending label check and raise ``ValueError`` if one found bad labels.

    Also reads the device records of calls captured in CUDA graphs (their latest replay).
    """
    poll(wait=True)
    for record, vocab_size, ignore_index in _captured:
        count, low, high, first = (int(x) for x in record.tolist())
        if count:
            raise ValueError(_message(count, low, high, first, vocab_size, ignore_index,
                                      deferred=True))
