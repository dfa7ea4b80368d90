"""Every launch the Triton stages plan for a GPU compiles: each constexpr that a kernel uses
as a ``tl.arange`` range or a block's shape is a power of 2, for every token count.

The stages pick rows a program, widths and grids from N, k and V on the host (small-call
rules among them). A rule that lands on a range Triton refuses fails only at the token
counts where it does so, and only when compiled: pass 29's one row a program per 256
tokens of the call gave best_tiles 3, 5, 6 or 7 rows at 768-2047 tokens, which no CPU test
reached. Here each op's host side runs as on a Hopper GPU (its configs, TMA descriptors,
132 multiprocessors, the GPU's sort and rescan settings) on CPU tensors, every launch
recorded instead of run (no kernel runs: the outputs are never read), over token counts
that cross each rule's thresholds.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay import ops  # noqa: E402
from megatron_overlay.ops import label_check  # noqa: E402
from megatron_overlay.ops.kernels import launch as launch_module  # noqa: E402
from megatron_overlay.ops.kernels import triton_impl, triton_topk  # noqa: E402,F401

ARANGE = re.compile(r"tl\.arange\(\s*0\s*,\s*([A-Z_][A-Z0-9_]*)\s*\)")
SHAPE = re.compile(r"tl\.(?:zeros|full)\(\s*\[([^\]]*)\]")
NAME = re.compile(r"\b([A-Z_][A-Z0-9_]*)\b")
# token counts: every one to 2100, then each side of every multiple of 64 to 16448, and
# the 32768
TOKENS = sorted(set(range(1, 2101)) | {m * 64 + d for m in range(33, 258) for d in (-1, 0, 1)}
                | {32767, 32768})
FEW_TOKENS = [1, 255, 256, 257, 767, 768, 1000, 1025, 2047, 2049, 4097, 8193]


@functools.lru_cache(maxsize=None)
def _power_of_2_names(fn) -> frozenset[str]:
    """The constexprs a kernel's own source (``fn``, its Python function) takes as a range
    or a block's shape."""
    src = inspect.getsource(fn)
    names = set(ARANGE.findall(src))
    for shape in SHAPE.findall(src):
        names.update(NAME.findall(shape))
    return frozenset(names)


@pytest.fixture
def planned(monkeypatch):
    """The launches of each call, recorded: (kernel, grid, constexprs)."""
    launches = []
    originals = {name: getattr(launch_module, name) for name in
                 ("launch", "interpreting", "sm_count", "check_device", "default_tma")}
    fakes = {
        "launch": lambda kernel, grid, *args, **constexprs:
            launches.append((kernel, grid, constexprs)),
        "interpreting": lambda: False,  # the GPU's configs and settings
        "sm_count": lambda device: 132,  # an H100 / H200
        "check_device": lambda *tensors: None,
        "default_tma": lambda hidden, weight: True,  # Hopper's load path
    }
    for name, module in list(sys.modules.items()):
        if not name.startswith("megatron_overlay.ops"):
            continue
        for attr, original in originals.items():
            if getattr(module, attr, None) is original:
                monkeypatch.setattr(module, attr, fakes[attr])
    # on CPU the ops check labels and ids eagerly (on CUDA: inside the kernels)
    monkeypatch.setattr(label_check, "check_eagerly", lambda *a, **k: None)
    monkeypatch.setattr(label_check, "check_ids_eagerly", lambda *a, **k: None)
    monkeypatch.setenv("MEGATRON_OVERLAY_IMPL", "triton")
    return launches


def _check(launches, where):
    assert launches, f"{where}: no launch recorded"
    for kernel, grid, constexprs in launches:
        name = kernel.fn.__name__
        bad = {key: constexprs[key] for key in _power_of_2_names(kernel.fn) if key in constexprs
               and (constexprs[key] < 1 or constexprs[key] & (constexprs[key] - 1))}
        assert not bad, f"{where}: {name} planned with {bad}, not powers of 2"
        assert all(g >= 1 for g in grid) and grid[0] < 2 ** 31 and \
            all(g < 65536 for g in grid[1:]), f"{where}: {name}'s grid {grid}"


@pytest.mark.parametrize("vocab", [151936, 20000])
def test_topk_launches_compile_at_every_token_count(planned, vocab):
    hidden_size = 64
    weight = torch.randn(vocab, hidden_size).bfloat16()
    hidden = torch.randn(TOKENS[-1], hidden_size).bfloat16()
    labels = torch.randint(0, vocab, (TOKENS[-1],))
    for n in TOKENS:
        for k in (1, 8, 23, 24, 32, 45, 64) if n <= 4200 else (1, 8, 32):
            planned.clear()
            ops.linear_topk_logprobs(hidden[:n], weight, k, temperature=0.7)
            _check(planned, f"top-k, N = {n}, k = {k}, V = {vocab}")
        for k in (8, 32):  # with labels and entropy: finalize in the last launch
            planned.clear()
            ops.linear_topk_logprobs(hidden[:n], weight, k, labels=labels[:n],
                                     return_entropy=True, temperature=0.7)
            _check(planned, f"top-k with labels, N = {n}, k = {k}, V = {vocab}")


@pytest.mark.parametrize("dtypes, invariant", [
    ((torch.float32, torch.float32), "1"), ((torch.float32, torch.bfloat16), "1"),
    ((torch.bfloat16, torch.float32), "1"), ((torch.float16, torch.float16), "1"),
    ((torch.bfloat16, torch.bfloat16), "0")])
def test_every_ops_launches_compile_in_each_mode(planned, monkeypatch, dtypes, invariant):
    # fp32 and mixed operands (their own configs, blocks of split halves), fp16, and batch
    # invariance off (splits chosen for N); forward and backward
    from megatron_overlay.ops import batch_invariance
    monkeypatch.setenv(batch_invariance.ENV, invariant)
    vocab, hidden_size = 20000, 64
    h_dtype, w_dtype = dtypes
    weight = torch.randn(vocab, hidden_size).to(w_dtype)
    hidden = torch.randn(FEW_TOKENS[-1], hidden_size).to(h_dtype)
    labels = torch.randint(0, vocab, (FEW_TOKENS[-1],))
    ids = torch.randint(0, vocab, (FEW_TOKENS[-1], 8))
    for n in FEW_TOKENS:
        for k in (1, 8, 32):
            planned.clear()
            ops.linear_topk_logprobs(hidden[:n], weight, k, temperature=0.7)
            _check(planned, f"top-k, N = {n}, k = {k}, {dtypes}, invariant {invariant}")
        planned.clear()
        ops.linear_logprob_entropy(hidden[:n], weight, labels[:n], temperature=0.7)
        _check(planned, f"log-prob, N = {n}, {dtypes}, invariant {invariant}")
        planned.clear()
        ops.linear_logprobs_at(hidden[:n], weight, ids[:n], temperature=0.7)
        _check(planned, f"at ids, N = {n}, {dtypes}, invariant {invariant}")
    for n in (1, 257, 2049):  # the backward: its token blocks and vocab chunks
        h = hidden[:n].clone().requires_grad_()
        w = weight.clone().requires_grad_()
        log_probs, entropy = ops.linear_logprob_entropy(h, w, labels[:n], temperature=0.7)
        planned.clear()
        (log_probs.sum() + entropy.sum()).backward()
        _check(planned, f"log-prob backward, N = {n}, {dtypes}, invariant {invariant}")


def test_logprob_and_at_ids_launches_compile_at_every_token_count(planned):
    vocab, hidden_size = 151936, 64
    weight = torch.randn(vocab, hidden_size).bfloat16()
    hidden = torch.randn(TOKENS[-1], hidden_size).bfloat16()
    labels = torch.randint(0, vocab, (TOKENS[-1],))
    ids = torch.randint(0, vocab, (TOKENS[-1], 32))
    for n in TOKENS:
        planned.clear()
        ops.linear_logprob_entropy(hidden[:n], weight, labels[:n], temperature=0.7)
        _check(planned, f"log-prob, N = {n}")
        for k in (1, 8, 32):
            planned.clear()
            ops.linear_logprobs_at(hidden[:n], weight, ids[:n, :k], temperature=0.7)
            _check(planned, f"at ids, N = {n}, k = {k}")


def test_a_plan_off_the_powers_of_2_is_caught(planned):
    # the check itself, on what pass 29's rule planned at 768 tokens (3 rows a program)
    weight = torch.randn(151936, 64).bfloat16()
    hidden = torch.randn(768, 64).bfloat16()
    ops.linear_topk_logprobs(hidden, weight, 8, temperature=0.7)
    kernel, grid, constexprs = next(rec for rec in planned
                                    if rec[0].fn.__name__ == "merge_topk_kernel")
    assert "BLOCK_R" in _power_of_2_names(kernel.fn)
    with pytest.raises(AssertionError, match="not powers of 2"):
        _check([(kernel, grid, {**constexprs, "BLOCK_R": 3})], "the rule as it was")
