"""Out-of-range labels: the eager check (CPU, strict mode) and the deferred device-side path.

The deferred path's queue runs on CPU too (a CPU record needs no copy or event), so its
raise-once logic is tested here; the CUDA side (no sync, NaN outputs, check_labels) is in
test_cuda_graphs.py.
"""

from __future__ import annotations

import pytest
import torch

from megatron_overlay.ops import LinearLogprobEntropy, LogprobParams, linear_logprob_entropy
from megatron_overlay.ops import label_check

V = 300


def _inputs(n=40, h=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(V, h, generator=g) / h ** 0.5
    labels = torch.randint(0, V, (n,), generator=g)
    return hidden, weight, labels


@pytest.fixture(autouse=True)
def _empty_queue():
    label_check._pending.clear()
    yield
    label_check._pending.clear()


def test_cpu_raises_before_any_work_naming_the_labels():
    hidden, weight, labels = _inputs()
    labels[3], labels[9], labels[11] = V + 5, -7, -100  # -100 is ignore_index: fine
    with pytest.raises(ValueError) as err:
        linear_logprob_entropy(hidden, weight, labels)
    msg = str(err.value)
    for part in ("labels out of range", "2 label id(s)", f"[0, {V})", "smallest -7",
                 f"largest {V + 5}", "first at token 3", "ignore_index=-100"):
        assert part in msg, (part, msg)


def test_strict_mode_from_argument_or_environment(monkeypatch):
    monkeypatch.delenv(label_check.STRICT_ENV, raising=False)
    assert not label_check.strict_mode(None)
    assert label_check.strict_mode(True)
    monkeypatch.setenv(label_check.STRICT_ENV, "1")
    assert label_check.strict_mode(None)
    assert not label_check.strict_mode(False)  # the argument wins
    from megatron_overlay.processors.context import read_context
    from megatron_overlay.processors.fused_logprob import FUSED_LOGPROB_KEYS

    context = read_context({"strict_labels": True}, FUSED_LOGPROB_KEYS, "fused_logprob")
    assert LogprobParams(**context).strict_labels is True
    with pytest.raises(TypeError, match="strict_labels"):
        LogprobParams(strict_labels="yes")


def test_op_past_the_check_gives_nan_not_a_wrong_answer():
    """Bad rows (what CUDA computes before the host learns): NaN log-prob and gradient;
    the other rows are exactly what they are without the bad row."""
    hidden, weight, labels = _inputs()
    good_lp, good_ent = linear_logprob_entropy(hidden, weight, labels)
    labels = labels.clone()
    labels[5] = V
    h = hidden.clone().requires_grad_()
    lp, ent = LinearLogprobEntropy.apply(h, weight, labels, LogprobParams(), None)
    assert torch.isnan(lp[5]) and not torch.isnan(ent[5])
    keep = torch.arange(len(labels)) != 5
    assert torch.equal(lp[keep], good_lp[keep]) and torch.equal(ent, good_ent)
    lp.sum().backward()
    assert torch.isnan(h.grad[5]).all() and not torch.isnan(h.grad[keep]).any()


def test_deferred_record_raises_once_at_the_next_poll():
    _, _, labels = _inputs()
    labels[7], labels[20] = V, V + 40
    label_check.defer(label_check.bad_labels(labels, V, -100), labels, V, -100)
    with pytest.raises(ValueError, match=r"earlier call.*2 label id\(s\).*smallest 300, "
                                         r"largest 340, first at token 7"):
        label_check.poll()
    label_check.poll()  # raised once, then dropped
    label_check.defer(label_check.bad_labels(labels.clamp(0, V - 1), V, -100), labels, V, -100)
    label_check.check_labels()  # a clean record raises nothing


def test_token_ids_past_the_check_give_nan_rows_and_no_out_of_bounds_gather():
    """What CUDA computes before the host learns of bad token ids: those rows' log-probs
    and gradients are NaN (the ids are clamped for the gather); other rows are exact."""
    from megatron_overlay.ops import linear_logprobs_at
    from megatron_overlay.ops.linear_logprobs_at import LinearLogprobsAt

    hidden, weight, labels = _inputs()
    ids = torch.stack([labels, (labels + 1) % V], dim=1)
    good, _ = linear_logprobs_at(hidden, weight, ids, temperature=0.7)
    ids = ids.clone()
    ids[5, 1], ids[9, 0] = V + 1000, -3
    h = hidden.clone().requires_grad_()
    lp, _ = LinearLogprobsAt.apply(h, weight, ids, LogprobParams(temperature=0.7), None)
    bad = torch.zeros(len(ids), dtype=torch.bool)
    bad[[5, 9]] = True
    assert torch.isnan(lp[bad]).all() and torch.equal(lp[~bad], good[~bad])
    lp.sum().backward()
    assert torch.isnan(h.grad[bad]).all() and not torch.isnan(h.grad[~bad]).any()


def test_deferred_token_id_record_names_token_ids_and_the_token():
    ids = torch.zeros(6, 4, dtype=torch.int64)
    ids[2, 3], ids[4, 0] = V, -1
    label_check.defer_ids(label_check.record(label_check.bad_ids(ids, V), ids), ids, V)
    with pytest.raises(ValueError, match=rf"token_ids out of range \(found on the GPU in an "
                                         rf"earlier call.*\[0, {V}\); got 2 outside it \("
                                         rf"smallest -1, largest {V}, first at token 2\)"):
        label_check.poll()
    label_check.poll()  # raised once
    with pytest.raises(ValueError, match=rf"^token_ids out of range: ids must lie in \[0, {V}\)"
                                         rf"; got 2 outside it .*first at token 2"):
        label_check.check_ids_eagerly(ids, V)
    label_check.check_ids_eagerly(ids.clamp(0, V - 1), V)


def test_the_top_k_pad_id_in_token_ids_names_its_cause():
    """A top-k row whose outputs are NaN (on CUDA: a bad per-row temperature) has the pad
    id; passed on as token_ids it is out of range, and the error says where it came from."""
    from megatron_overlay.ops.topk_merge import PAD_ID
    ids = torch.zeros(3, 2, dtype=torch.int64)
    ids[1] = PAD_ID
    with pytest.raises(ValueError, match=rf"largest {PAD_ID}, first at token 1\); {PAD_ID} is "
                                         rf"the fused top-k's pad id.*per-row temperature"):
        label_check.check_ids_eagerly(ids, V)
    with pytest.raises(ValueError) as err:  # another bad id: no such hint
        label_check.check_ids_eagerly(ids.clamp(max=V), V)
    assert "pad id" not in str(err.value)


class _FakeCudaEvent:
    """torch.cuda.Event's part label_check uses, on the CPU machine: bound to the device of
    its first record (as CUDA's: recording it on another device's stream raises), and a
    synchronize that lets other threads run (torch's releases the GIL)."""

    current = 0  # the "current CUDA device" the fake label_check._current_device returns

    def __init__(self):
        self.device = None

    def record(self, stream=None):  # stream: label_check._current_stream's (below)
        device = _FakeCudaEvent.current if stream is None else stream.device_index
        if self.device is not None and self.device != device:
            raise RuntimeError(f"Event device {self.device} does not match recording "
                               f"stream's device {device}")
        self.device = device

    def query(self):
        return True

    def synchronize(self):
        import time
        time.sleep(0)


@pytest.fixture
def fake_cuda_records(monkeypatch):
    """label_check's CUDA path (host_record -> a kernel writes -> defer_record -> poll) with
    plain CPU buffers in the pool (no pinned allocation) and fake events."""
    from megatron_overlay.ops import label_check
    monkeypatch.setattr(torch.cuda, "Event", _FakeCudaEvent)
    monkeypatch.setattr(label_check, "_current_device", lambda: _FakeCudaEvent.current)
    monkeypatch.setattr(label_check, "_current_stream",
                        lambda device: __import__("types").SimpleNamespace(device_index=device))
    monkeypatch.setattr(label_check, "_free_buffers", {})
    monkeypatch.setattr(label_check, "_free_events", {})
    monkeypatch.setattr(label_check, "_lent", {})
    monkeypatch.setattr(label_check, "_pending", __import__("collections").deque())
    real_empty = torch.empty

    def empty(*shape, pin_memory=False, **kwargs):  # the pool's new buffers: not pinned
        return real_empty(*shape, **kwargs)
    monkeypatch.setattr(label_check.torch, "empty", empty)
    _FakeCudaEvent.current = 0
    return label_check


def _one_call(label_check, bad_id: int | None):
    """What a CUDA call does with its record: lent, written by the kernel, queued."""
    rec = label_check.host_record(1, torch.device("cpu"))
    rec.copy_(torch.tensor([[1, bad_id, bad_id, 0]] if bad_id is not None else [[0, 0, 0, 0]]))
    label_check.defer_record(rec, torch.zeros(3, dtype=torch.long), 10, -100)


def test_records_from_many_threads_are_each_raised_once(fake_cuda_records):
    """Threads that run the ops and check_labels at once: every bad record raises exactly
    once, and no pooled buffer is handed out twice (a poll's read-then-pop raced: records
    raised twice or never, buffers pooled twice)."""
    import sys
    import threading
    label_check = fake_cuda_records
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    seen, errors = [], []
    try:
        def worker(first):
            for i in range(first, first + 300):
                try:
                    _one_call(label_check, i)
                    label_check.check_labels()
                except ValueError as e:
                    seen.append(int(str(e).split("smallest ")[1].split(",")[0]))
                except Exception as e:  # noqa: BLE001 - any other is the bug
                    errors.append(e)
        threads = [threading.Thread(target=worker, args=(k * 1000,)) for k in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        try:
            label_check.check_labels()
        except ValueError as e:
            seen.append(int(str(e).split("smallest ")[1].split(",")[0]))
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors[:3]
    assert sorted(seen) == [k * 1000 + i for k in range(4) for i in range(300)]
    pooled = [id(b) for bufs in label_check._free_buffers.values() for b in bufs]
    assert len(pooled) == len(set(pooled)) and not label_check._lent


def test_a_pooled_record_is_read_by_its_own_rows_counts(fake_cuda_records, monkeypatch):
    """The poll reads a pooled record's counts through the buffer's kept memoryview (no
    numpy, no slice a call): the count column of the record's rows only. The pooled
    buffer (4 rows) is left full of a bad record by an earlier, longer call; a 3-row call
    whose kernel writes its rows clean reads clean, one that counts a bad id in its second
    row names that row's ids (read in full only then), and each call gets the same view of
    the buffer."""
    label_check = fake_cuda_records
    stale = torch.full((4, 4), 7, dtype=torch.int64)
    label_check._free_buffers[4] = [label_check._Pinned(stale)]
    full_reads = []
    raise_if_bad = label_check._raise_if_bad
    monkeypatch.setattr(label_check, "_raise_if_bad",
                        lambda *a, **k: full_reads.append(1) or raise_if_bad(*a, **k))
    clean = [0, label_check._I64_MAX, -label_check._I64_MAX, 0]  # a clean kernel row
    views = []
    for rows_written, raises in (([clean] * 3, False), ([clean, [2, -5, 12, 300], clean], True)):
        rec = label_check.host_record(3, torch.device("cpu"))
        views.append(rec)
        assert rec.shape == (3, 4) and rec.data_ptr() == stale.data_ptr()
        rec.copy_(torch.tensor(rows_written))  # what the kernel writes: its 3 rows
        label_check.defer_record(rec, torch.zeros(3, dtype=torch.long), 10, -100)
        if raises:
            with pytest.raises(ValueError, match=r"2 label id\(s\) outside \[0, 10\).*"
                                                 r"smallest -5, largest 12, first at token 300"):
                label_check.check_labels()
        else:
            label_check.check_labels()  # row 3's stale 7s are not the record's
            assert not full_reads  # the counts alone said clean
    assert views[0] is views[1] and full_reads == [1]
    assert [b.buf is stale for b in label_check._free_buffers[4]] == [True]


def test_pooled_events_stay_on_their_device(fake_cuda_records):
    """One process, two GPUs (a teacher's top-k on one, the student on the other): an event
    recorded on device 0 is never recorded again on device 1."""
    label_check = fake_cuda_records
    for device in (0, 1, 0, 1):
        _FakeCudaEvent.current = device
        _one_call(label_check, None)
        label_check.check_labels()
    assert set(label_check._free_events) == {0, 1}
    assert all(e.device == d for d, events in label_check._free_events.items() for e in events)


def test_a_call_without_labels_gives_its_lent_buffer_back(fake_cuda_records):
    label_check = fake_cuda_records
    rec = label_check.host_record(1, torch.device("cpu"))
    label_check.defer_record(rec, torch.zeros(0, dtype=torch.long), 10, -100)
    rec = label_check.host_record(1, torch.device("cpu"))
    label_check.defer_ids(rec, torch.zeros(0, 4, dtype=torch.long), 10)
    assert not label_check._lent and not label_check._pending
    assert len(label_check._free_buffers[1]) == 1  # the same buffer, lent twice


@pytest.fixture
def capturing(fake_cuda_records, monkeypatch):
    """fake_cuda_records inside a CUDA-graph capture (``capturing.on``), where nothing the
    kernels write exists before a replay: ``synced`` lists the devices check_labels waited
    for."""
    label_check = fake_cuda_records
    state = __import__("types").SimpleNamespace(on=False, synced=[])
    monkeypatch.setattr(label_check, "_capturing", lambda: state.on)
    monkeypatch.setattr(label_check, "_captured",
                        __import__("collections").deque(maxlen=label_check.MAX_CAPTURED))
    monkeypatch.setattr(label_check, "_graph_records", [])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: state.synced.append(device))
    return state


def _captured_call(label_check, state, rows=1):
    """One op call made inside a capture: its record, lent and queued as a CUDA call's,
    but not written (the kernel does not run)."""
    state.on = True
    rec = label_check.host_record(rows, torch.device("cpu"))
    label_check.defer_record(rec, torch.zeros(3, dtype=torch.long), 10, -100)
    state.on = False
    return rec


def test_a_captured_record_reads_clean_until_a_replay_writes_it(fake_cuda_records, capturing):
    """A captured call's record: a pooled buffer (here left full of a bad record by a
    reused allocation) zeroed at capture, so check_labels before the first replay raises
    nothing; a replay that finds bad labels is reported once, the next bad replay again;
    the buffer never goes back to the pool (every replay writes it)."""
    label_check = fake_cuda_records
    stale = torch.full((1, 4), 7, dtype=torch.int64)  # a bad record: 7 ids, 7 to 7
    label_check._free_buffers[1] = [label_check._Pinned(stale)]
    rec = _captured_call(label_check, capturing)
    assert rec.data_ptr() == stale.data_ptr() and not label_check._pending
    label_check.check_labels()  # before the first replay: clean, not the stale 7s
    assert capturing.synced == [0]
    for _ in range(2):  # each replay that finds a bad label: reported once
        rec.copy_(torch.tensor([[2, -5, 12, 1]]))  # what a replay's kernel writes
        with pytest.raises(ValueError, match=r"2 label id\(s\) outside \[0, 10\).*smallest -5, "
                                             r"largest 12, first at token 1"):
            label_check.check_labels()
        label_check.check_labels()
    _one_call(label_check, None)  # an eager call after it: a new buffer, the pool's own
    label_check.check_labels()
    assert all(b.buf.data_ptr() != stale.data_ptr()
               for bufs in label_check._free_buffers.values() for b in bufs)
    assert not label_check._lent


def test_captured_records_are_read_bounded_and_kept(fake_cuda_records, capturing,
                                                    monkeypatch):
    """A program that captures without end has the latest MAX_CAPTURED records read: an
    older one is not (its call's outputs are NaN all the same), but its buffer stays
    allocated, since its graph may still replay and write it."""
    label_check = fake_cuda_records
    monkeypatch.setattr(label_check, "_captured", __import__("collections").deque(maxlen=3))
    first = _captured_call(label_check, capturing).data_ptr()  # nothing here holds it
    records = [_captured_call(label_check, capturing) for _ in range(3)]
    kept = [b for b in label_check._graph_records if b.data_ptr() == first]
    assert len(kept) == 1  # the module holds the oldest one's buffer
    kept[0][:1].copy_(torch.tensor([[1, 11, 11, 0]]))  # what a replay of its graph writes
    label_check.check_labels()  # the oldest fell out of the window
    records[0].copy_(torch.tensor([[1, 12, 12, 0]]))
    with pytest.raises(ValueError, match="smallest 12"):
        label_check.check_labels()
    assert len(label_check._graph_records) == 4


def test_a_captured_call_without_labels_keeps_its_buffer_out_of_the_pool(fake_cuda_records,
                                                                         capturing):
    label_check = fake_cuda_records
    capturing.on = True
    rec = label_check.host_record(1, torch.device("cpu"))
    label_check.defer_record(rec, torch.zeros(0, dtype=torch.long), 10, -100)
    capturing.on = False
    assert not label_check._lent and not label_check._free_buffers.get(1)
    assert [b.data_ptr() for b in label_check._graph_records] == [rec.data_ptr()]
