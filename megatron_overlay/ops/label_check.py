"""The label-range check (and the token-id range check), without a device->host sync on CUDA.

Labels outside ``[0, vocab)`` (other than ``ignore_index``) must never give a silent wrong
answer, but checking them on the host costs a sync per call (the CPU stops running ahead
of the GPU once per microbatch) and breaks ``torch.cuda.graph`` capture. So:

* CPU tensors, and *strict* mode (``strict_labels=True`` or the environment variable
  ``MEGATRON_OVERLAY_STRICT_LABELS=1``): ``check_eagerly`` raises ``ValueError`` before
  any work (one sync on CUDA).
* CUDA, default: the op computes a per-token ``bad`` mask on the device, makes those
  tokens' log-probs and their gradients NaN (so nothing downstream is silently wrong), and
  keeps a record (rows of 4 numbers: count, smallest and largest bad id, first bad
  position, one row per block of tokens, reduced on the host when read) in pinned host
  memory: the stages' kernels write it there themselves (``host_record`` lends the
  buffer; pinned memory is device-addressable under unified addressing), and
  ``defer_record`` queues it behind an event; a record made on the device (``defer``, the
  torch stages on CUDA) is copied there asynchronously. The host learns of it, and
  ``ValueError`` is raised naming the labels, at the first of:
    1. any later forward of the op (once it has launched its main kernel, so that the
       GPU starts that sooner), or the end of the backward of any call, once the GPU has
       written the record (polled with ``Event.query()``: no wait);
    2. ``check_labels()``, which waits for every pending record (call it where you sync
       anyway, e.g. where the loss is read back).
  Inside CUDA-graph capture no event can be queued for a replay, so a captured call's
  record gets a pinned buffer of its own, never pooled or freed, which every replay
  rewrites and which reads clean until the first replay (zeroed by the host at capture:
  the kernels do not run then); ``check_labels()`` synchronizes the device and reads the
  latest replay of each captured call (of the latest MAX_CAPTURED captured calls),
  reporting a bad one once.

The vocab ids of ``linear_logprobs_at`` / ``fused_logprobs_at`` (``token_ids`` [N, K]) go
the same way (the stages' ``logits_at_ids``, through ``check_ids``' check, makes the
record, ``defer_ids`` queues it, ``check_ids_eagerly`` is the strict form): on CUDA, rows
with an id outside ``[0, vocab)`` get NaN log-probs and gradients (such an id lies in no
vocab shard, so the gather reads nothing for it), and the ValueError names ``token_ids``;
the same strict switch checks them eagerly.

Under TP every rank holds the same labels and the same record, but each polls on its own
clock, so ranks can raise at different calls: the one that raises exits while its peers
wait in the next collective until the launcher (torchrun) stops them, as already happens
when one data-parallel rank raises. ``strict_labels=True`` checks on every rank before
any work, at the same call.
"""

from __future__ import annotations

import threading
from collections import deque
from functools import partial

import torch

from .env_flags import env_flag
# torch.cuda.current_device() without its Python wrapper's lazy-init check (0.17 against
# 0.44 us on an H100 host); bound here, so that tests can stand in for it
from .forward_only import _current_device

STRICT_ENV = "MEGATRON_OVERLAY_STRICT_LABELS"
# Pending records at most; past it the oldest is waited for (the GPU would be this many
# op calls behind the CPU, which a training step does not reach).
MAX_PENDING = 256
# Captured calls whose records check_labels() reads, the latest ones (each read costs it a
# few us); an older captured call's bad labels still make its outputs NaN, unreported.
# Its record stays allocated all the same (_graph_records): a graph may replay, and
# write it, as long as the graph lives, which is not known here.
MAX_CAPTURED = 1024
_I64_MAX = torch.iinfo(torch.int64).max

_pending: deque = deque()   # (host record, event, message, pooled buffer, device), oldest first
_captured: deque = deque(maxlen=MAX_CAPTURED)  # (host record, message, device) captured
# Every pinned buffer a captured call's kernels write at each replay: never freed (32 bytes
# a row, a power of 2 of rows a call), since the pinned allocator would hand a freed one to
# the next pinned tensor while a live graph still writes into it.
_graph_records: list = []
# The pinned buffers and events, reused once their record is read: torch's pinned allocator
# queries the events of every block still in flight on each allocation (12-21
# cudaEventQuery a call behind a busy GPU, docs/BENCHMARKS.md), and a new event is created
# in the driver at its first record.
_free_buffers: dict = {}    # rows (a power of 2) -> [_Pinned]
_lent: dict = {}            # data_ptr -> (_Pinned, lent in a capture), not yet queued
# an event records on its device's streams only: pooled per CUDA device index
_free_events: dict = {}     # device index -> [torch.cuda.Event]
# The queues and pools above are shared by every thread that runs the ops (a trainer's and
# an inference thread's, say): each read-modify-write of them holds this lock; no wait on
# the GPU happens under it.
_lock = threading.Lock()
# message(count, low, high, first, deferred=...) -> str: one per kind of record


class _Pinned:
    """A pooled pinned int64 [rows, 4] buffer, with what each call would otherwise make
    afresh: its first ``rows`` rows as a tensor (a slice: ~6 us of a GPU host's time,
    docs/h200/pass31) and its count column as a memoryview, which the poll reads in pure
    Python (numpy's view and any(): ~25 us profiled on that host, the poll's most)."""
    __slots__ = ("buf", "counts", "views")

    def __init__(self, buf: torch.Tensor):
        self.buf = buf
        self.counts = memoryview(buf.numpy()).cast("B").cast("q")[0::4]
        self.views: dict = {}   # rows -> buf[:rows]

    def view(self, rows: int) -> torch.Tensor:
        view = self.views.get(rows)
        if view is None:
            view = self.views[rows] = self.buf[:rows]
        return view


def _capturing() -> bool:
    # no capture without an initialized CUDA context: is_initialized() is a flag read
    # (0.06 us on the CPU machine), where is_available() asks the driver (~2.2 us on pass
    # 12's H100 host; 3 calls a forward)
    return torch.cuda.is_initialized() and torch._C._cuda_isCurrentStreamCapturing()


# The current stream's Stream object, by the raw (id, device index, device type) triple
# torch keeps it under: ``Event.record()`` builds a new one through
# ``torch.cuda.current_stream()`` on every call (8.3 us on an H100's host, against 0.4 us
# for the triple and 1.6 us for ``record(stream)``: docs/h200/pass12/h100/r3 and pass13's
# host_primitives.txt).
# A Stream object is that triple and nothing more, so a kept one is the one torch would
# build. Bounded: a program that makes streams without end (external ones) refills it.
_streams: dict = {}
_MAX_STREAMS = 64


def _current_stream(device: int) -> torch.cuda.Stream:
    raw = torch._C._cuda_getCurrentStream(device)
    stream = _streams.get(raw)
    if stream is None:
        if len(_streams) >= _MAX_STREAMS:
            _streams.clear()
        stream = _streams[raw] = torch.cuda.Stream(stream_id=raw[0], device_index=raw[1],
                                                   device_type=raw[2])
    return stream


def strict_mode(strict_labels: bool | None) -> bool:
    """``strict_labels`` if given, else ``$MEGATRON_OVERLAY_STRICT_LABELS`` (ops/env_flags.py:
    1 / true / yes / on strict, 0 / false / no / off or unset not)."""
    if strict_labels is not None:
        return bool(strict_labels)
    return env_flag(STRICT_ENV, False, "1: every label checked on the host before any work, "
                                       "one sync a call on CUDA; 0: the deferred check")


def _token(index: int, batch: int | None) -> str:
    """Where token ``index`` of the ops' rows is: with ``batch``, the rows are a [batch,
    seq] tensor's flattened position-major (the processors' order: row s * batch + b), so
    the place is named in the caller's [batch, seq] terms."""
    if batch is None:
        return f"token {index}"
    return f"[batch {index % batch}, position {index // batch}]"


def _message(count: int, low: int, high: int, first: int, vocab_size: int,
             ignore_index: int, deferred: bool = False, batch: int | None = None) -> str:
    when = (" (found on the GPU in an earlier call of the fused log-prob op, whose "
            "log-probs for those tokens are NaN)") if deferred else ""
    return (f"labels out of range{when}: {count} label id(s) outside [0, {vocab_size}) and "
            f"not ignore_index={ignore_index} (smallest {low}, largest {high}, first at "
            f"{_token(first, batch)}); mask padding with ignore_index")


def _ids_message(count: int, low: int, high: int, first: int, vocab_size: int, k: int,
                 name: str, deferred: bool = False, batch: int | None = None) -> str:
    when = (" (found on the GPU in an earlier call, whose log-probs for those tokens are "
            "NaN)") if deferred else ""
    # the top-k's pad id (topk_merge.PAD_ID): where ids came from a top-k row whose values
    # were NaN, which on CUDA is how a bad per-row temperature shows (ops/temperature.py)
    pad = (f"; {_I64_MAX} is the fused top-k's pad id, which its Triton stage returns in a "
           f"row whose log-probs are NaN (a per-row temperature that was not finite or out "
           f"of range, or non-finite hidden states)") if high == _I64_MAX else ""
    return (f"{name} out of range{when}: ids must lie in [0, {vocab_size}); got {count} "
            f"outside it (smallest {low}, largest {high}, first at "
            f"{_token(first // k, batch)}){pad}")


def check_eagerly(labels: torch.Tensor, vocab_size: int, ignore_index: int,
                  batch: int | None = None) -> None:
    """Raise ``ValueError`` now if any label is out of range (one host sync on CUDA).
    ``batch``: where the labels are a [batch, seq] tensor's flattened position-major (the
    processors'): the message names the first one's [batch, position]."""
    if labels.numel():
        _raise_if_bad(record(bad_labels(labels, vocab_size, ignore_index), labels),
                      partial(_message, vocab_size=vocab_size, ignore_index=ignore_index,
                              batch=batch))


def check_ids_eagerly(ids: torch.Tensor, vocab_size: int, name: str = "token_ids",
                      batch: int | None = None) -> None:
    """Raise ``ValueError`` now if any id of ``ids`` [N, K] is out of range (one host sync
    on CUDA); ``batch`` as check_eagerly's."""
    if ids.numel():
        _raise_if_bad(record(bad_ids(ids, vocab_size), ids),
                      partial(_ids_message, vocab_size=vocab_size, k=ids.shape[-1], name=name,
                              batch=batch))


def bad_ids(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Bool like ``ids``: True where an id is outside [0, vocab_size)."""
    return (ids < 0) | (ids >= vocab_size)


def bad_labels(labels: torch.Tensor, vocab_size: int, ignore_index: int) -> torch.Tensor:
    """[N] bool, on the labels' device: True where a label is out of range."""
    return (labels != ignore_index) & bad_ids(labels, vocab_size)


def record(bad: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[1, 4] int64 on the device: (count, smallest bad id, largest bad id, first bad index
    in the flattened tensor). A record may have more rows, one per block of tokens (the
    Triton ``finalize``'s, or the top-k's last kernel's: kernels/_record.py);
    ``_raise_if_bad`` reduces them."""
    ids = labels.reshape(-1).to(torch.int64)
    bad = bad.reshape(-1)
    if not bad.numel():  # no tokens: a clean record (amin / amax have nothing to reduce)
        return torch.tensor([[0, _I64_MAX, -_I64_MAX, 0]], dtype=torch.int64,
                            device=bad.device)
    return torch.stack([
        bad.sum(dtype=torch.int64),
        torch.where(bad, ids, _I64_MAX).amin(),
        torch.where(bad, ids, -_I64_MAX).amax(),
        bad.to(torch.uint8).argmax().to(torch.int64),  # the first True (or 0 if none)
    ])[None]


def defer(bad: torch.Tensor, labels: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    """Queue the device-side check of one call's labels (CUDA; no sync)."""
    if labels.numel():
        defer_record(record(bad, labels), labels, vocab_size, ignore_index)


def defer_record(rec: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                 ignore_index: int, batch: int | None = None) -> None:
    """Queue the check of one call's labels from a record the stages made (``record``'s
    layout, [rows, 4]; the Triton kernels write one row per block of tokens); no sync.
    ``batch``: as check_eagerly's."""
    if labels.numel():
        _defer(rec, partial(_message, vocab_size=vocab_size, ignore_index=ignore_index,
                            batch=batch))
    else:
        _release(rec)


def defer_ids(rec: torch.Tensor, ids: torch.Tensor, vocab_size: int,
              name: str = "token_ids", batch: int | None = None) -> None:
    """Queue the check of one call's vocab ids [N, K] from their record (``record``'s
    layout; the stages' ``check_ids`` (and ``logits_at_ids``) writes a row per block of
    tokens, positions in the flattened ids); no sync. ``batch``: as check_eagerly's."""
    if ids.numel():
        _defer(rec, partial(_ids_message, vocab_size=vocab_size, k=ids.shape[-1], name=name,
                            batch=batch))
    else:
        _release(rec)


def _raise_if_bad(rec: torch.Tensor, message, deferred: bool = False) -> None:
    """``ValueError(message(...))`` if the record's rows count any bad id (reads it: a
    sync if it is on the GPU)."""
    # the records have a row per block of tokens (N / 32 of them for ids): look at the
    # counts first, instead of turning every row into Python ints (which cost a
    # 32768-token call ~1 ms of host time); a host record through a numpy view of it
    # (on the CPU machine 0.9 us against 5 for torch's reshape, slice and any(); on an
    # H100's host the whole read 5.9 us against 9.0 before: docs/h200/pass13/h100/host)
    if rec.is_cuda:
        rec = rec.reshape(-1, 4)
        if not bool(rec[:, 0].any()):
            return
    else:
        host = rec.numpy()
        if not (host[:, 0] if host.ndim == 2 else host.reshape(-1, 4)[:, 0]).any():
            return
        rec = rec.reshape(-1, 4)
    rows = [r for r in rec.tolist() if r[0]]
    if rows:
        raise ValueError(message(sum(r[0] for r in rows), min(r[1] for r in rows),
                                 max(r[2] for r in rows), min(r[3] for r in rows),
                                 deferred=deferred))


def host_record(rows: int, device: torch.device) -> torch.Tensor:
    """Where a stage's kernel writes one call's record (int64 [rows, 4]): a pinned host
    buffer, which ``defer_record`` queues (inside a CUDA-graph capture: keeps for the
    graph's replays, which rewrite it; ``check_labels`` reads it)."""
    buf = _take_buffer(rows)
    view = buf.view(rows)
    captured = _capturing()
    if captured:  # clean until the first replay writes it (nothing runs in a capture)
        view.zero_()
    with _lock:
        _lent[view.data_ptr()] = (buf, captured)
    return view


def _take_buffer(rows: int) -> _Pinned:
    size = 1 << max(rows - 1, 0).bit_length()
    with _lock:
        free = _free_buffers.get(size)
        if free:
            return free.pop()
    return _Pinned(torch.empty(size, 4, dtype=torch.int64, pin_memory=True))


def _give_back(buf: _Pinned, event=None, device: int | None = None) -> None:
    with _lock:
        _free_buffers.setdefault(buf.buf.shape[0], []).append(buf)
        if event is not None:
            _free_events.setdefault(device, []).append(event)


def _unlend(rec: torch.Tensor) -> tuple:
    """(pooled buffer, lent inside a capture) of a record ``host_record`` lent; (None,
    None) for any other (a device record, or a CPU one of the tests)."""
    if rec.is_cuda:
        return None, None
    with _lock:
        return _lent.pop(rec.data_ptr(), (None, None))


def _release(rec: torch.Tensor) -> None:
    """A lent record that will not be queued (a call with no labels): back to the pool,
    unless a graph captured its call (its replays may write it)."""
    buf, captured = _unlend(rec)
    if captured:
        with _lock:
            _graph_records.append(buf.buf)
    elif buf is not None:
        _give_back(buf)


def _defer(rec: torch.Tensor, message) -> None:
    buf, captured = _unlend(rec)
    if buf is None and not rec.is_cuda:  # CPU (tests): the record is already on the host
        with _lock:
            _pending.append((rec, None, message, None, None))
        return
    if buf is None:  # a device record: copied into a pooled buffer
        buf = _take_buffer(rec.shape[0])
        host = buf.view(rec.shape[0])
        captured = _capturing()
        if captured:
            host.zero_()
        host.copy_(rec, non_blocking=True)
        rec = host
    # on the current stream, as the kernels that wrote the record (the ops run on the
    # hidden states' device: forward_only.call)
    device = _current_device()
    if captured:  # the buffer is the graph's from now on: never back to the pool
        with _lock:
            _graph_records.append(buf.buf)
            _captured.append((rec, message, device))
        return
    with _lock:
        free = _free_events.get(device)
        event = free.pop() if free else None
    if event is None:
        event = torch.cuda.Event()
    event.record(_current_stream(device))
    with _lock:
        _pending.append((rec, event, message, buf, device))
    while len(_pending) > MAX_PENDING:
        poll(wait=True, at_most=len(_pending) - MAX_PENDING)


def poll(wait: bool = False, at_most: int | None = None) -> None:
    """Raise ``ValueError`` for the oldest finished record that found bad labels.

    ``wait=False`` looks only at records whose copy has finished (no sync); ``wait=True``
    waits for all of them (``at_most``: the oldest ones only). Records are dropped once
    looked at, so an error is raised once, by one thread.
    """
    if not _pending or (not wait and _capturing()):  # no event queries inside a capture
        return
    while at_most is None or at_most > 0:
        with _lock:  # take the oldest: no other thread reads it, or returns its buffer
            if not _pending:
                return
            event = _pending[0][1]
            if event is not None and not wait and not event.query():
                return
            host, event, message, buf, device = _pending.popleft()
        if at_most is not None:
            at_most -= 1
        try:
            if event is not None and wait:
                event.synchronize()  # outside the lock: other threads go on meanwhile
            # a pooled record reads clean through its counts (outside the lock: the
            # buffer is this thread's until given back); a bad one, or another, as before
            if buf is None or any(buf.counts[:host.shape[0]]):
                _raise_if_bad(host, message, deferred=True)
        finally:  # read: the buffer and event serve a later call
            if buf is not None:
                _give_back(buf, event, device)


def check_labels() -> None:
    """Wait for every pending label (and token-id) check and raise ``ValueError`` if one
    found bad ids.

    Also reads the records of calls captured in CUDA graphs (the latest MAX_CAPTURED),
    after ``torch.cuda.synchronize`` of each device that captured one (every stream of
    it, where the eager records wait for their own events): each one's latest replay (a
    bad replay that a clean one followed is not reported; its outputs are NaN all the
    same), reported once, by one thread (a record reads clean again until a replay
    rewrites it); a call captured but not yet replayed reads clean.
    """
    poll(wait=True)
    with _lock:
        captured = list(_captured)
    for device in {device for _, _, device in captured}:
        torch.cuda.synchronize(device)  # the replays that write the records
    for rec, message, _ in captured:
        with _lock:  # read and cleared by one thread: another sees it clean
            try:
                _raise_if_bad(rec, message, deferred=True)
            except ValueError:
                rec.zero_()  # reported: clean until a replay finds bad ids again
                raise
