"""CUDA-graph capture and no host sync, on a GPU (skipped without one).

The op forward, forward+backward, and ``fused_logprob`` inside a megatron GPTModel
forward are captured with ``torch.cuda.graph`` and replayed: bitwise equal to eager, also
after new data is copied into the static inputs. ``torch.cuda.set_sync_debug_mode("error")``
proves the forward and backward never wait for the GPU, in each precision mode;
out-of-range labels are then reported by ``check_labels()`` / the next call
(ops/label_check.py).
"""

from __future__ import annotations

import re

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay.ops import (check_labels, label_check, linear_logprob_entropy,  # noqa: E402
                                  linear_logprobs_at, linear_topk_logprobs)

N, H, V = 1029, 256, 7000
# The precision modes of the op (issue 18): (hidden dtype, weight dtype, logits_dtype)
MODES = {"default": (torch.bfloat16, torch.bfloat16, None),
         "bf16 logits": (torch.bfloat16, torch.bfloat16, torch.bfloat16),
         "fp32 hidden": (torch.float32, torch.bfloat16, None),
         "fp32 weight": (torch.bfloat16, torch.float32, None)}


def _inputs(seed=0, dtype=torch.bfloat16, n=N, weight_dtype=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(n, H, device="cuda", generator=g).to(dtype)
    weight = (torch.randn(V, H, device="cuda", generator=g) * (2.0 / H ** 0.5)).to(
        weight_dtype or dtype)
    labels = torch.randint(0, V, (n,), device="cuda", generator=g)
    labels[::9] = -100
    return hidden, weight, labels


def _capture(fn, warmup=3, pool=None):
    """Warm ``fn`` up on a side stream (Triton compiles, cuBLAS picks), then capture it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = fn()
    return graph, out


def _eager_fb(hidden, weight, labels, logits_dtype=None):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7, logits_dtype=logits_dtype)
    (lp.sum() * 0.5 + ent.sum() * 0.25).backward()
    return lp.detach(), ent.detach(), h.grad, w.grad


def test_forward_capture_replays_bitwise():
    hidden, weight, labels = _inputs()
    with torch.no_grad():
        graph, (lp, ent) = _capture(
            lambda: linear_logprob_entropy(hidden, weight, labels, temperature=0.7))
        for seed in (0, 1):
            new_h, new_w, new_y = _inputs(seed)
            hidden.copy_(new_h), weight.copy_(new_w), labels.copy_(new_y)
            graph.replay()
            ref_lp, ref_ent = linear_logprob_entropy(new_h, new_w, new_y, temperature=0.7)
            assert torch.equal(lp, ref_lp) and torch.equal(ent, ref_ent)


@pytest.mark.parametrize("mode", MODES)
def test_forward_backward_capture_replays_bitwise(mode):
    dtype, weight_dtype, logits_dtype = MODES[mode]
    hidden, weight, labels = _inputs(dtype=dtype, weight_dtype=weight_dtype)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()

    def step():
        h.grad = w.grad = None
        lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7,
                                         logits_dtype=logits_dtype)
        (lp.sum() * 0.5 + ent.sum() * 0.25).backward()
        return lp.detach(), ent.detach(), h.grad, w.grad

    graph, outs = _capture(step)
    for seed in (0, 2):
        new_h, new_w, new_y = _inputs(seed, dtype=dtype, weight_dtype=weight_dtype)
        with torch.no_grad():
            h.copy_(new_h), w.copy_(new_w), labels.copy_(new_y)
        graph.replay()
        for got, ref in zip(outs, _eager_fb(new_h, new_w, new_y, logits_dtype)):
            assert torch.equal(got, ref)


@pytest.mark.parametrize("k", [1, 8, 32])
def test_topk_forward_captures_without_a_sync(k):
    """The top-k op's two stages (the tile lists, then the rescan: a sort, a kernel, a
    merge) in one graph, bitwise eager's on new data; eager, no host sync."""
    hidden, weight, labels = _inputs()

    def topk():
        return linear_topk_logprobs(hidden, weight, k, temperature=0.7, labels=labels,
                                    return_entropy=True)

    with torch.no_grad():
        graph, out = _capture(topk)
        for seed in (0, 3):
            new_h, new_w, new_y = _inputs(seed)
            hidden.copy_(new_h), weight.copy_(new_w), labels.copy_(new_y)
            graph.replay()
            ref = linear_topk_logprobs(new_h, new_w, k, temperature=0.7, labels=new_y,
                                       return_entropy=True)
            assert all(torch.equal(a, b) for a, b in zip(out, ref))
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            topk()
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("mode", MODES)
def test_no_host_sync_in_forward_and_backward(mode):
    dtype, weight_dtype, logits_dtype = MODES[mode]
    hidden, weight, labels = _inputs(dtype=dtype, weight_dtype=weight_dtype)
    _eager_fb(hidden, weight, labels, logits_dtype)  # compile first: Triton's first launch may sync
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7,
                                         logits_dtype=logits_dtype)
        (lp.sum() * 0.5 + ent.sum() * 0.25).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_bad_labels_on_cuda_raise_later_naming_them():
    hidden, weight, labels = _inputs()
    labels[4], labels[600] = V + 3, -5
    label_check._pending.clear()
    lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)  # no raise
    assert torch.isnan(lp[4]) and torch.isnan(lp[600]) and not torch.isnan(ent).any()
    with pytest.raises(ValueError, match=rf"2 label id\(s\) outside \[0, {V}\).*smallest -5, "
                                         rf"largest {V + 3}, first at token 4"):
        check_labels()
    check_labels()  # reported once
    # the next call reports an earlier one once the GPU has run its check
    linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match="earlier call"):
        linear_logprob_entropy(hidden, weight, labels.clamp(0, V - 1), temperature=0.7)
    # strict mode: at once, before any work
    with pytest.raises(ValueError, match="labels out of range: 2 label"):
        linear_logprob_entropy(hidden, weight, labels, temperature=0.7, strict_labels=True)
    label_check._pending.clear()


@pytest.mark.parametrize("n, k", [(256, 8), (256, 1), (1029, 32)])
def test_topk_bad_labels_raise_later_eager_and_captured(n, k):
    """Out-of-range labels through the top-k op (at 256 tokens finalize runs in its last
    kernel's launch, pass 22; at 1029 and k = 32 in its own): their rows' log-probs are
    NaN, the top-k is the call's without labels, and check_labels() names them, once;
    captured, a replay's bad labels likewise."""
    hidden, weight, labels = _inputs(n=n)
    labels[4], labels[n - 7] = V + 3, -5
    label_check._pending.clear()

    def topk():
        return linear_topk_logprobs(hidden, weight, k, temperature=0.7, labels=labels,
                                    return_entropy=True)

    with torch.no_grad():
        # before the call with bad labels: any later call raises its error once the GPU has
        # written the record
        plain = linear_topk_logprobs(hidden, weight, k, temperature=0.7)
        out = topk()  # no raise
        bad = torch.zeros(n, dtype=torch.bool, device="cuda")
        bad[[4, n - 7]] = True
        assert torch.equal(out.log_probs.isnan(), bad) and not out.entropy.isnan().any()
        assert torch.equal(out.topk_ids, plain.topk_ids)
        assert torch.equal(out.topk_log_probs, plain.topk_log_probs)
        with pytest.raises(ValueError, match=rf"2 label id\(s\) outside \[0, {V}\).*smallest "
                                             rf"-5, largest {V + 3}, first at token 4"):
            check_labels()
        check_labels()  # reported once
        labels[4], labels[n - 7] = 0, 1
        graph, captured = _capture(topk)
        graph.replay()
        check_labels()  # a clean replay
        labels[9] = V
        graph.replay()
        with pytest.raises(ValueError, match=rf"1 label id\(s\) outside \[0, {V}\)"):
            check_labels()
        check_labels()
        assert captured.log_probs[9].isnan() and not captured.log_probs[:9].isnan().any()
    label_check._pending.clear()


def test_at_ids_bad_ids_raise_later_eager_and_captured():
    """Out-of-range token ids through linear_logprobs_at (checked and gathered in one
    launch): their rows' log-probs are NaN, the others the call's with those ids made
    good, and check_labels() names them, once; captured, a replay's bad ids likewise."""
    n = 300
    hidden, weight, _ = _inputs(n=n)
    g = torch.Generator(device="cuda").manual_seed(4)
    ids = torch.randint(0, V, (n, 8), device="cuda", generator=g)
    label_check._pending.clear()
    good = linear_logprobs_at(hidden, weight, ids, temperature=0.7)[0]
    ids[5, 3], ids[200, 0] = V, -2
    with torch.no_grad():
        lp = linear_logprobs_at(hidden, weight, ids, temperature=0.7)[0]  # no raise
        bad = torch.zeros(n, dtype=torch.bool, device="cuda")
        bad[[5, 200]] = True
        assert lp[bad].isnan().all() and torch.equal(lp[~bad], good[~bad])
        with pytest.raises(ValueError, match=rf"token_ids out of range.*\[0, {V}\); got 2 "
                                             rf"outside it \(smallest -2, largest {V}, first "
                                             rf"at token 5\)"):
            check_labels()
        check_labels()
        ids[5, 3], ids[200, 0] = 1, 2
        graph, (captured, _) = _capture(
            lambda: linear_logprobs_at(hidden, weight, ids, temperature=0.7))
        graph.replay()
        check_labels()
        ids[7, 1] = V + 1
        graph.replay()
        with pytest.raises(ValueError, match=rf"token_ids out of range.*got 1 outside it"):
            check_labels()
        check_labels()
        assert captured[7].isnan().all() and not captured[:7].isnan().any()
    label_check._pending.clear()


def test_fused_logprob_in_gptmodel_forward_capture():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    from megatron_overlay.processors.fused_logprob import fused_logprob
    from megatron_overlay import model_builder

    cfg = model_builder.ModelConfig(vocab=8192, hidden=256, layers=2, heads=4, seq=256, batch=2,
                              dtype=torch.bfloat16)
    model_builder.init_distributed(0, 1, model_builder.free_port(), 1, device="cuda")
    try:
        # Built on the CPU (megatron's inference RNG tracker: fork is a no-op), then moved:
        # megatron's CUDA RNG tracker forks with set_state, which graph capture refuses
        # (megatron's own CUDA graphs swap in a graph-safe tracker); not the op's concern.
        model = model_builder.build_model(cfg).cuda().eval()  # bf16 throughout
        input_ids, position_ids, mask, labels, _ = (
            t.cuda() for t in model_builder.batch(cfg))
        context = {"temperature": 0.7}

        def forward():
            out = model(input_ids, position_ids, mask, labels=labels,
                        output_processor=fused_logprob, output_processor_context=context)
            return out.log_probs, out.entropy

        with torch.no_grad():
            ref_lp, ref_ent = (t.clone() for t in forward())
            graph, (lp, ent) = _capture(forward)
            graph.replay()
            assert torch.equal(lp, ref_lp) and torch.equal(ent, ref_ent)
            new_ids = torch.randint(0, cfg.vocab, input_ids.shape, device="cuda")
            input_ids.copy_(new_ids)
            graph.replay()
            ref_lp, ref_ent = forward()
            assert torch.equal(lp, ref_lp) and torch.equal(ent, ref_ent)
    finally:
        model_builder.shutdown()


def test_bad_token_ids_on_cuda_raise_later_without_a_sync():
    from megatron_overlay.ops import linear_logprobs_at

    hidden, weight, labels = _inputs()
    labels = labels.clamp(0, V - 1)
    ids = torch.stack([labels, (labels + 7) % V], dim=1)
    ids[3, 1] = V + 5
    label_check._pending.clear()
    h = hidden.detach().requires_grad_()
    raised = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        lp, _ = linear_logprobs_at(h, weight, ids, temperature=0.7)  # no raise, no sync
        try:  # the op's next call (README: "forward or backward") raises once the GPU has
            lp.nan_to_num().sum().backward()  # run the check, still without a sync
        except ValueError as err:
            raised.append(str(err))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isnan(lp[3]).all() and not torch.isnan(lp[4]).any()
    if not raised:  # the check had not finished by then: check_labels() waits for it
        with pytest.raises(ValueError) as err:
            check_labels()
        raised.append(str(err.value))
    check_labels()  # raised once, not again
    assert len(raised) == 1
    assert re.search(rf"token_ids out of range .*got 1 outside it "
                     rf"\(smallest {V + 5}, largest {V + 5}, first at token 3", raised[0])
    with pytest.raises(ValueError, match=r"^token_ids out of range: ids must lie"):
        linear_logprobs_at(hidden, weight, ids, temperature=0.7, strict_ids=True)
    label_check._pending.clear()


def test_label_records_reuse_their_pinned_buffers():
    """The kernels write the label check's records into pinned host buffers
    (label_check.host_record), reused once read: of many calls in flight, of two sizes,
    one with a bad label, that label is reported once (by a later call or check_labels),
    and later calls take their buffers from the pool."""
    label_check._pending.clear()
    label_check._free_buffers.clear()
    hidden, weight, labels = _inputs()
    good = labels.clamp(0, V - 1)
    bad = good.clone()
    bad[700] = V
    raised = []

    def calls(rounds, bad_at=None, sync=False):
        for i in range(rounds):
            n = N if i % 2 else 300
            try:
                linear_logprob_entropy(hidden[:n], weight, (bad if i == bad_at else good)[:n],
                                       temperature=0.7)
                linear_topk_logprobs(hidden[:n], weight, 4, labels=good[:n], temperature=0.7)
                if sync:  # each record read (and its buffer back) before the next call
                    torch.cuda.synchronize()
                    label_check.poll()
            except ValueError as err:
                raised.append(str(err))
        try:
            check_labels()
        except ValueError as err:
            raised.append(str(err))

    calls(40, bad_at=17)
    assert len(raised) == 1, raised
    assert re.search(rf"1 label id\(s\) outside \[0, {V}\).*first at token 700", raised[0])
    assert not label_check._lent and not label_check._pending
    pooled = {id(b) for bufs in label_check._free_buffers.values() for b in bufs}
    assert pooled
    calls(6, sync=True)  # buffers of both sizes are in the pool: no new one
    assert len(raised) == 1
    assert {id(b) for bufs in label_check._free_buffers.values() for b in bufs} == pooled


@pytest.mark.parametrize("op", ["logprob", "at_ids"])
def test_a_captured_call_checks_its_labels_at_each_replay(op):
    """A captured call's label (or id) check: ``check_labels()`` before the first replay
    raises nothing, though the graph's memory pool holds leftovers that read as a bad
    record (the capture's allocations land on them); after a replay with a bad label it
    names it, once; after a clean replay nothing. The calls are forward-only and
    forward+backward in one graph."""
    from megatron_overlay.ops import linear_logprobs_at

    hidden, weight, labels = _inputs()
    labels = labels.clamp(0, V - 1)
    ids = torch.stack([labels, (labels + 7) % V], dim=1)
    clean = labels.clone()
    h = hidden.clone().requires_grad_()

    def step():
        if op == "logprob":
            lp, _ = linear_logprob_entropy(h, weight, labels, temperature=0.7)
        else:
            lp, _ = linear_logprobs_at(h, weight, ids, temperature=0.7)
        lp.nan_to_num().sum().backward()
        with torch.no_grad():  # a second, forward-only call in the same graph
            linear_logprob_entropy(hidden, weight, clean, temperature=0.7)

    pool = torch.cuda.graph_pool_handle()
    junk_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(junk_graph, pool=pool):  # 7s where the capture allocates next
        junk = torch.full((1 << 22,), 7, dtype=torch.int64, device="cuda")
    junk_graph.replay()
    torch.cuda.synchronize()
    del junk
    label_check.check_labels()
    graph, _ = _capture(step, pool=pool)
    check_labels()  # not replayed yet: clean
    bad = (ids, (4, 1)) if op == "at_ids" else (labels, (4,))
    with torch.no_grad():
        bad[0][bad[1]] = V + 2
    graph.replay()
    name = "token_ids out of range" if op == "at_ids" else r"1 label id\(s\) outside"
    with pytest.raises(ValueError, match=rf"{name}.*smallest {V + 2}, largest {V + 2}, "
                                         rf"first at token 4"):
        check_labels()
    check_labels()  # reported once
    with torch.no_grad():
        bad[0][bad[1]] = 3
    graph.replay()
    check_labels()
    assert not label_check._lent
