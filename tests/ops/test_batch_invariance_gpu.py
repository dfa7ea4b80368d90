"""Batch invariance of the Triton path on a GPU (skipped without one): a token's log-prob
and entropy, its top-k (ids, log-probs, and with labels the labels' log-probs and the
entropy) and its log-probs at given ids are bitwise the same whatever N and its position,
in each precision mode; TP = 2 too, with 2 GPUs."""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay.ops import (linear_logprob_entropy, linear_logprobs_at,  # noqa: E402
                                  linear_topk_logprobs)
from megatron_overlay.ops.kernels import autotune_configs, topk_forward  # noqa: E402

H, V = 512, 20000
CASES = [(1, 0), (1, 2999), (7, 3), (128, 64), (129, 1000), (2000, 500)]


def _inputs(n=3000, dtype=torch.bfloat16, seed=0, device="cuda", weight_dtype=None):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, H, generator=g).to(dtype).to(device)
    weight = (torch.randn(V, H, generator=g) * (2.0 / H ** 0.5)).to(weight_dtype or dtype).to(
        device)
    labels = torch.randint(0, V, (n,), generator=g).to(device)
    labels[::11] = -100
    return hidden, weight, labels


def _check(hidden, weight, labels, tp_group=None, logits_dtype=None):
    with torch.no_grad():
        ref = linear_logprob_entropy(hidden, weight, labels, temperature=0.7, tp_group=tp_group,
                                     logits_dtype=logits_dtype)
        for n, start in CASES:
            sl = slice(start, start + n)
            got = linear_logprob_entropy(hidden[sl], weight, labels[sl], temperature=0.7,
                                         tp_group=tp_group, logits_dtype=logits_dtype)
            for a, b in zip(got, ref):
                assert torch.equal(a, b[sl]), (n, start)
        perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
        perm = perm.to(labels.device)  # the same on every TP rank
        got = linear_logprob_entropy(hidden[perm], weight, labels[perm], temperature=0.7,
                                     tp_group=tp_group, logits_dtype=logits_dtype)
        for a, b in zip(got, ref):
            assert torch.equal(a, b[perm])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_triton_same_bits_whatever_n_and_position(dtype):
    _check(*_inputs(dtype=dtype))


def test_at_ids_same_bits_whatever_n_and_position():
    """linear_logprobs_at (its ids checked and gathered in one launch, finalize folding the
    forward's splits): a row's log-probs at its ids and entropy whatever N and position."""
    hidden, weight, _ = _inputs()
    ids = torch.randint(0, V, (len(hidden), 8), generator=torch.Generator().manual_seed(2))
    ids = ids.to(hidden.device)
    with torch.no_grad():
        ref = linear_logprobs_at(hidden, weight, ids, temperature=0.7, return_entropy=True)
        for n, start in CASES:
            sl = slice(start, start + n)
            got = linear_logprobs_at(hidden[sl], weight, ids[sl], temperature=0.7,
                                     return_entropy=True)
            for a, b in zip(got, ref):
                assert torch.equal(a, b[sl]), (n, start)


@pytest.mark.parametrize("dtype,weight_dtype,logits_dtype", [
    (torch.bfloat16, torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16, None),
    (torch.bfloat16, torch.float32, None)], ids=["bf16 logits", "fp32 hidden", "fp32 weight"])
def test_triton_precision_modes_same_bits(dtype, weight_dtype, logits_dtype):
    _check(*_inputs(dtype=dtype, weight_dtype=weight_dtype), logits_dtype=logits_dtype)


def test_row_blocked_launches_keep_the_bits(monkeypatch):
    """N past the partial-statistics budget runs in row blocks: same bits."""
    hidden, weight, labels = _inputs()
    with torch.no_grad():
        ref = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
        monkeypatch.setattr(autotune_configs, "PARTIAL_STATS_BUDGET_BYTES", 16 * 300 * 16)
        got = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def _check_topk(hidden, weight, labels, k, tp_group=None, logits_dtype=None):
    """The top-k op's outputs, with and without labels, bitwise under slices and a
    permutation of the rows; returns the full call's outputs with labels."""
    def topk(rows, with_labels):
        kw = dict(labels=labels[rows], return_entropy=True) if with_labels else {}
        return linear_topk_logprobs(hidden[rows], weight, k, temperature=0.7,
                                    tp_group=tp_group, logits_dtype=logits_dtype, **kw)

    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
    perm = perm.to(labels.device)
    with torch.no_grad():
        for with_labels in (True, False):
            ref = topk(slice(None), with_labels)
            for rows in [slice(start, start + n) for n, start in CASES] + [perm]:
                got = topk(rows, with_labels)
                for a, b in zip(got, ref):
                    if b is not None:
                        assert torch.equal(a, b[rows]), (rows, with_labels)
        return topk(slice(None), True)


@pytest.mark.parametrize("k", [1, 8, 32])
def test_topk_same_bits_whatever_n_and_position(k):
    """And, on the 16-bit tile the log-prob forward also runs, the labels' log-probs and
    the entropy are linear_logprob_entropy's bit for bit (the same statistics' chunks)."""
    hidden, weight, labels = _inputs()
    top = _check_topk(hidden, weight, labels, k)
    with torch.no_grad():
        lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    assert torch.equal(top.log_probs, lp) and torch.equal(top.entropy, ent)


@pytest.mark.parametrize("dtype,weight_dtype,logits_dtype", [
    (torch.float32, torch.float32, None), (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.bfloat16, None), (torch.bfloat16, torch.float32, None)],
    ids=["fp32", "bf16 logits", "fp32 hidden", "fp32 weight"])
def test_topk_precision_modes_same_bits(dtype, weight_dtype, logits_dtype):
    _check_topk(*_inputs(dtype=dtype, weight_dtype=weight_dtype), 8, logits_dtype=logits_dtype)


@pytest.mark.parametrize("dtype,weight_dtype,logits_dtype", [
    (torch.bfloat16, torch.bfloat16, None), (torch.float16, torch.float16, None),
    (torch.float32, torch.float32, None), (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.bfloat16, None), (torch.bfloat16, torch.float32, None)],
    ids=["bf16", "fp16", "fp32", "bf16 logits", "fp32 hidden", "fp32 weight"])
@pytest.mark.parametrize("k", [8, 16])
def test_topk_is_invariant_across_the_second_maxima_threshold(k, dtype, weight_dtype,
                                                              logits_dtype, monkeypatch):
    """Launches of up to SECOND_MAX_SMALL_TOKENS rows store the tiles' second maxima from
    k = 8 (known maxima are taken from the forward kernel), larger ones do not (every
    chosen tile is recomputed): with the threshold at 1000 rows, the slices of up to 129
    rows take the first path and the 2000- and 3000-row calls the second, and a row's
    outputs are the same bits in every precision mode. The slices' path at k = 8 is
    pack_second's; at k = 16 pack_third's (EXACT_SECOND_MAX_MIN_K, since pass 19)."""
    monkeypatch.setattr(topk_forward, "SECOND_MAX_SMALL_TOKENS", 1000)
    hidden, weight, labels = _inputs(dtype=dtype, weight_dtype=weight_dtype)
    num_v = -(-V // 256)
    assert topk_forward._second_max(num_v, k, 129, 256)
    assert not topk_forward._second_max(num_v, k, 2000, 256)
    _check_topk(hidden, weight, labels, k, logits_dtype=logits_dtype)


@pytest.mark.parametrize("dtype,weight_dtype,logits_dtype", [
    (torch.bfloat16, torch.bfloat16, None), (torch.float16, torch.float16, None),
    (torch.float32, torch.float32, None), (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.bfloat16, None), (torch.bfloat16, torch.float32, None)],
    ids=["bf16", "fp16", "fp32", "bf16 logits", "fp32 hidden", "fp32 weight"])
@pytest.mark.parametrize("k", [8, 32])
def test_topk_is_invariant_across_the_exact_second_maxima_threshold(k, dtype, weight_dtype,
                                                                    logits_dtype, monkeypatch):
    """Launches of up to EXACT_SECOND_MAX_TOKENS rows store the tiles' second maxima
    exactly (pack_third: tiles of two known logits >= thr are not recomputed), larger ones
    rounded up (k = 32) or not at all (k = 8, past SECOND_MAX_SMALL_TOKENS): with both
    thresholds at 1000 rows (and the exact maxima from k = 8), the slices of up to 129
    rows take the first path and the 2000- and 3000-row calls the others; a row's outputs
    are the same bits."""
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_TOKENS", 1000)
    monkeypatch.setattr(topk_forward, "EXACT_SECOND_MAX_MIN_K", 8)
    monkeypatch.setattr(topk_forward, "SECOND_MAX_SMALL_TOKENS", 1000)
    hidden, weight, labels = _inputs(dtype=dtype, weight_dtype=weight_dtype)
    num_v = -(-V // 256)
    assert topk_forward._second_max(num_v, k, 129, 256) == 2
    assert topk_forward._second_max(num_v, k, 2000, 256) == (1 if k == 32 else 0)
    _check_topk(hidden, weight, labels, k, logits_dtype=logits_dtype)


def test_topk_row_blocked_launches_keep_the_bits(monkeypatch):
    """N past the top-k's partial budget runs in row blocks: same bits."""
    hidden, weight, labels = _inputs()
    with torch.no_grad():
        ref = linear_topk_logprobs(hidden, weight, 8, temperature=0.7, labels=labels,
                                   return_entropy=True)
        monkeypatch.setattr(topk_forward, "TOPK_PARTIAL_BUDGET_BYTES", 300 * 2000)
        got = linear_topk_logprobs(hidden, weight, 8, temperature=0.7, labels=labels,
                                   return_entropy=True)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)


def _tp_worker(rank, port, result):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=2)
    try:
        hidden, weight, labels = _inputs(device=f"cuda:{rank}")
        shard = weight.shape[0] // 2
        _check(hidden, weight[rank * shard:(rank + 1) * shard].contiguous(), labels,
               tp_group=dist.group.WORLD)
        _check_topk(hidden, weight[rank * shard:(rank + 1) * shard].contiguous(), labels, 8,
                    tp_group=dist.group.WORLD)
        result[rank] = "ok"
    except Exception as e:  # reported by the parent
        result[rank] = f"{type(e).__name__}: {e}"
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="TP = 2 needs 2 GPUs")
def test_tp2_same_bits_whatever_n_and_position():
    import torch.multiprocessing as mp

    from megatron_overlay.model_builder import free_port

    manager = mp.Manager()
    result = manager.dict()
    mp.spawn(_tp_worker, args=(free_port(), result), nprocs=2)
    assert dict(result) == {0: "ok", 1: "ok"}
