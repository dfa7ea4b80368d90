"""The Triton stages on a CUDA GPU against the chunked torch reference (skipped without one).

Moderate shapes (a few hundred tokens, a few thousand vocab entries, partial tiles in
every dimension); both the TMA path (Hopper) and the pointer path; bf16, fp16, fp32.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (the Triton kernels' GPU path); the interpreter tests in "
                "test_triton_interpreter.py cover the math on CPU", allow_module_level=True)
triton = pytest.importorskip("triton", reason="Triton is not installed")

from megatron_overlay.ops import linear_logprob_entropy, torch_chunked  # noqa: E402
from megatron_overlay.ops.kernels import triton_impl  # noqa: E402

INV_T = 1.0 / 0.7
# (fp32 stats tolerance, gradient tolerance relative to the largest |reference| entry):
# 16-bit dtypes round d(logits) once to the input dtype before the gradient GEMMs.
TOL = {torch.float32: (2e-4, 1e-4), torch.bfloat16: (2e-4, 2e-2), torch.float16: (2e-4, 4e-3)}


def _inputs(n, h, v, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(n, h, device="cuda", generator=g).to(dtype)
    weight = (torch.randn(v, h, device="cuda", generator=g) * (2.0 / h ** 0.5)).to(dtype)
    labels = torch.randint(0, v, (n,), device="cuda", generator=g)
    labels[::5] = -1
    return hidden, weight, labels


def _tma_modes():
    modes = [False]
    if torch.cuda.get_device_capability()[0] >= 9:
        modes.append(True)
    return modes


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("entropy", [True, False])
@pytest.mark.parametrize("use_tma", _tma_modes())
@pytest.mark.parametrize("shape", [(300, 264, 5003), (1, 128, 1000), (1029, 512, 20000)])
def test_stages_match_torch(dtype, entropy, use_tma, shape):
    n, h, v = shape
    hidden, weight, labels = _inputs(n, h, v, dtype)
    ref = torch_chunked.forward_stats(hidden, weight, labels, INV_T, entropy)
    got = triton_impl.forward_stats(hidden, weight, labels, INV_T, entropy, use_tma=use_tma)
    stats_tol, grad_tol = TOL[dtype]
    torch.testing.assert_close(got, ref, atol=stats_tol, rtol=stats_tol)

    lse = ref[:, 0] + ref[:, 1].log()
    mean_z = ref[:, 0] + ref[:, 2] / ref[:, 1] if entropy else None
    g = torch.Generator(device="cuda").manual_seed(1)
    g_lp = torch.randn(n, device="cuda", generator=g)
    g_ent = torch.randn(n, device="cuda", generator=g) if entropy else None
    ref_dh, ref_dw = torch_chunked.backward(hidden, weight, labels, INV_T, lse, mean_z, g_lp, g_ent)
    dh, dw = triton_impl.backward(hidden, weight, labels, INV_T, lse, mean_z, g_lp, g_ent,
                                  use_tma=use_tma)
    assert dh.dtype == dw.dtype == torch.float32
    for got_t, ref_t in ((dh, ref_dh), (dw, ref_dw)):
        err = (got_t - ref_t).abs().max() / ref_t.abs().max()
        assert err < grad_tol, f"gradient error {err:.2e} > {grad_tol}"


def test_vocab_chunks_match_one_chunk():
    """The backward's vocab chunking (memory budget) does not change the result."""
    hidden, weight, labels = _inputs(257, 256, 9000, torch.bfloat16)
    stats = triton_impl.forward_stats(hidden, weight, labels, INV_T, True)
    lse = stats[:, 0] + stats[:, 1].log()
    mean_z = stats[:, 0] + stats[:, 2] / stats[:, 1]
    g_lp, g_ent = torch.randn(257, device="cuda"), torch.randn(257, device="cuda")
    one = triton_impl.backward(hidden, weight, labels, INV_T, lse, mean_z, g_lp, g_ent)
    many = triton_impl.backward(hidden, weight, labels, INV_T, lse, mean_z, g_lp, g_ent,
                                chunk_budget=257 * 2048 * 2)
    torch.testing.assert_close(many[0], one[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(many[1], one[1], atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("use_tma", _tma_modes())
def test_backward_configs_change_no_bit(dtype, use_tma):
    """The recompute kernel's loop and epilogue forms (tests/support/backward_forms.py:
    the epilogue in two halves or whole, the flattened or nested persistent loop, one
    program a tile) compute each d(logits) entry by the same operations: the gradients are
    the default config's to the bit (with labels, per-row temperatures, entropy, a partial
    last tile in N and V)."""
    from megatron_overlay.ops.kernels import autotune_configs
    from tests.support.backward_forms import backward_forms
    hidden, weight, labels = _inputs(1029, 512, 20000, dtype, seed=4)
    stats = triton_impl.forward_stats(hidden, weight, labels, INV_T, True)
    lse = stats[:, 0] + stats[:, 1].log()
    mean_z = stats[:, 0] + stats[:, 2] / stats[:, 1]
    g = torch.Generator(device="cuda").manual_seed(2)
    g_lp = torch.randn(1029, device="cuda", generator=g)
    g_ent = torch.randn(1029, device="cuda", generator=g)
    inv_t = torch.rand(1029, device="cuda", generator=g) + 0.5
    default = autotune_configs.backward_config(dtype, use_tma, False)
    ref = triton_impl.backward(hidden, weight, labels, inv_t, lse, mean_z, g_lp, g_ent,
                               use_tma=use_tma, config=default)
    for cfg in backward_forms(default):
        got = triton_impl.backward(hidden, weight, labels, inv_t, lse, mean_z, g_lp, g_ent,
                                   use_tma=use_tma, config=cfg)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]), cfg.name()


def test_op_matches_torch_impl(monkeypatch):
    """Through the autograd Function: Triton (default on CUDA) vs MEGATRON_OVERLAY_IMPL=torch."""
    hidden, weight, labels = _inputs(513, 256, 7000, torch.bfloat16, seed=3)
    labels[labels < 0] = -100
    results = {}
    for impl in ("torch", "triton"):
        monkeypatch.setenv("MEGATRON_OVERLAY_IMPL", impl)
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7)
        (lp.sum() * 0.5 + ent.sum() * 0.25).backward()
        results[impl] = (lp.detach(), ent.detach(), h.grad.float(), w.grad.float())
    ref, got = results["torch"], results["triton"]
    torch.testing.assert_close(got[0], ref[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(got[1], ref[1], atol=1e-4, rtol=0)
    for a, b in zip(got[2:], ref[2:]):
        assert ((a - b).abs().max() / b.abs().max()) < 2e-2


@pytest.mark.parametrize("per_row", [False, True])
def test_small_temperatures_keep_the_argmax_exact(per_row, monkeypatch):
    """Down to T = 1e-9 (|z| ~ 1e10): where the torch path's log-prob at the argmax is
    exactly 0 (-log s with s = 1: the rest underflows), the log-prob and top-k ops' Triton
    path gives 0 too, and no row is NaN: the forward kernels take the maximum off in raw
    logit units (_online_stats.fold_max). With m log2(e) rounded apart (before pass 17)
    the argmax's log-prob was off by ~|z| 6e-8 and rows were NaN from |z| ~ 1e9.
    Elsewhere the two paths' logits differ by their GEMMs' rounding, times 1 / T."""
    from megatron_overlay.ops import linear_logprobs_at, linear_topk_logprobs
    hidden, weight, _ = _inputs(300, 256, 5003, torch.float32, seed=7)
    biggest = (hidden @ weight.T).abs().max().item()
    for t in (1e-3, 1e-6, 1e-9):
        temp = torch.full((300,), t, device="cuda") if per_row else t
        outs = {}
        for impl in ("torch", "triton"):
            monkeypatch.setenv("MEGATRON_OVERLAY_IMPL", impl)
            top = linear_topk_logprobs(hidden, weight, 2, temperature=temp)
            ids = top.topk_ids[:, 0]
            lp, ent = linear_logprob_entropy(hidden, weight, ids, temperature=temp)
            # the at-ids op recomputes z at the ids with its own dot: finite, no more
            at, _ = linear_logprobs_at(hidden, weight, ids[:, None], temperature=temp)
            assert at.isfinite().all(), (impl, t)
            outs[impl] = (ids, torch.stack([top.topk_log_probs[:, 0], lp]), ent)
        (ids_r, lp_r, ent_r), (ids_t, lp_t, ent_t) = outs["torch"], outs["triton"]
        assert torch.equal(ids_t, ids_r), t
        assert lp_t.isfinite().all() and ent_t.isfinite().all(), t
        exact = lp_r == 0
        assert exact.sum() > 300, (t, exact.sum())  # of 600: most rows' s is 1
        assert (lp_t[exact] == 0).all(), (t, lp_t[exact].abs().max())
        tol = 1e-4 + 8 * torch.finfo(torch.float32).eps * biggest / t
        torch.testing.assert_close(lp_t, lp_r, atol=tol, rtol=0, msg=f"T = {t}")
        torch.testing.assert_close(ent_t, ent_r, atol=tol, rtol=0, msg=f"T = {t}")


def test_a_cpu_scalar_temperature_on_a_cuda_model_is_the_float():
    """A 0-d CPU tensor (as torch's scalars) on CUDA hidden states: the float's bits, no
    error (it was refused as a tensor on another device)."""
    hidden, weight, labels = _inputs(64, 128, 1000, torch.bfloat16, seed=5)
    labels[labels < 0] = -100  # the op's ignore_index (the stages' tests use -1)
    ref = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
    got = linear_logprob_entropy(hidden, weight, labels, temperature=torch.tensor(0.7))
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensors_on_another_gpu_than_the_current_one():
    """The kernels launch on the current device's stream: with the tensors on cuda:1 and
    cuda:0 current, the call runs on cuda:1 (as torch's ops do), the same bits as there."""
    hidden, weight, labels = (t.to("cuda:1") for t in _inputs(96, 128, 3000, torch.bfloat16,
                                                               seed=7))
    labels[labels < 0] = -100

    def run():
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7)
        (lp.sum() + ent.sum()).backward()
        return lp.detach(), ent.detach(), h.grad, w.grad

    with torch.cuda.device(1):
        want = run()
    torch.cuda.set_device(0)
    got = run()
    assert torch.cuda.current_device() == 0
    for a, b in zip(got, want):
        assert a.device == torch.device("cuda:1") and torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_bad_label_makes_only_its_rows_gradient_nan(dtype, monkeypatch):
    """What CUDA computes before the host learns of an out-of-range label (the check
    deferred, ops/label_check.py): that row's log-prob and d_hidden row are NaN, every
    other row's are the torch stage's (the flags applied in the recompute kernel; fp16's
    buffer scale leaves the bad row out) and ignored rows' gradients are 0 whatever
    flows into them."""
    from megatron_overlay.ops import label_check
    from megatron_overlay.ops.linear_logprob import LinearLogprobEntropy
    from megatron_overlay.ops.params import LogprobParams
    hidden, weight, labels = _inputs(300, 256, 5003, dtype, seed=5)
    labels[labels < 0] = -100
    labels[7], labels[100] = 5003, -4  # out of range
    g_lp = torch.randn(300, device="cuda")
    g_lp[labels == -100] = float("nan")  # ignored rows: their gradient is dropped
    results = {}
    with monkeypatch.context() as m:  # no raise from the calls' own polls meanwhile
        m.setattr(label_check, "poll", lambda wait=False: None)
        for impl in ("torch", "triton"):
            m.setenv("MEGATRON_OVERLAY_IMPL", impl)
            h = hidden.clone().requires_grad_()
            lp, ent = LinearLogprobEntropy.apply(h, weight, labels,
                                                 LogprobParams(temperature=0.7), None)
            torch.autograd.backward((lp, ent), (g_lp, torch.ones_like(ent)))
            results[impl] = (lp.detach(), h.grad.float())
    for _ in results:  # each call's deferred record: raised once each
        with pytest.raises(ValueError, match="2 label id"):
            label_check.check_labels()
    label_check.check_labels()
    bad = torch.zeros(300, dtype=torch.bool, device="cuda")
    bad[[7, 100]] = True
    for lp, d_h in results.values():
        assert torch.equal(lp.isnan(), bad)
        assert d_h[bad].isnan().all() and not d_h[~bad].isnan().any()
    ref, got = results["torch"][1][~bad], results["triton"][1][~bad]
    assert ((got - ref).abs().max() / ref.abs().max()) < 2e-2


def test_label_records_are_recorded_on_the_current_stream():
    """label_check keeps the current stream's Stream object (Event.record() builds one a
    call): the kept one is torch's current stream, on a side stream too, and a bad label
    of a call made on a side stream is raised once that stream has written it."""
    from megatron_overlay.ops import label_check
    device = torch.cuda.current_device()
    assert label_check._current_stream(device) == torch.cuda.current_stream()
    assert label_check._current_stream(device) is label_check._current_stream(device)
    side = torch.cuda.Stream()
    hidden, weight, labels = _inputs(300, 256, 5003, torch.bfloat16, seed=6)
    labels[labels < 0] = -100
    labels[11] = 5003
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        assert label_check._current_stream(device) == side
        torch.cuda._sleep(1 << 31)  # ~1 s: the side stream is busy, the default one idle
        lp, _ = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
        pending = label_check._pending[-1][1]
    assert not pending.query()  # recorded behind the side stream's work
    side.synchronize()
    assert pending.query()
    with pytest.raises(ValueError, match="1 label id"):
        label_check.check_labels()
    assert lp[11].isnan() and not lp[:11].isnan().any()


def _bf16_spacing(x: torch.Tensor) -> torch.Tensor:
    """The distance between neighbouring bf16 values at |x| (8 significant bits)."""
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(2.0 ** -120))) - 7)


def test_direct_d_hidden_is_one_rounding(monkeypatch):
    """A bf16 d_hidden whose vocab fits one chunk comes out of one cuBLAS product in bf16
    (autotune_configs.BACKWARD_DIRECT_D_HIDDEN): within a bf16 spacing of the fp32
    d_hidden everywhere (one rounding; a 16-bit reduction of split-K partials over the
    152k products a value would not be), as through the fp32 accumulator; d_weight as
    before, bit for bit."""
    from megatron_overlay.ops.kernels import autotune_configs

    n, h, v = 256, 512, 151936
    hidden, weight, labels = _inputs(n, h, v, torch.bfloat16, seed=4)
    stats = triton_impl.forward_stats(hidden, weight, labels, INV_T, True)
    lse = stats[:, 0] + stats[:, 1].log()
    mean_z = stats[:, 0] + stats[:, 2] / stats[:, 1]
    g_lp, g_ent = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    args = (hidden, weight, labels, INV_T, lse, mean_z, g_lp, g_ent)
    ref_dh, ref_dw = triton_impl.backward(*args, d_weight_dtype=torch.bfloat16)
    dh, dw = triton_impl.backward(*args, d_weight_dtype=torch.bfloat16,
                                  d_hidden_dtype=torch.bfloat16)
    monkeypatch.setattr(autotune_configs, "BACKWARD_DIRECT_D_HIDDEN", 0)
    acc_dh, _ = triton_impl.backward(*args, d_weight_dtype=torch.bfloat16,
                                     d_hidden_dtype=torch.bfloat16)
    assert ref_dh.dtype == torch.float32 and dh.dtype == acc_dh.dtype == torch.bfloat16
    spacing = _bf16_spacing(ref_dh)
    assert ((dh.float() - ref_dh).abs() <= spacing).all()
    assert ((acc_dh.float() - ref_dh).abs() <= spacing).all()
    assert torch.equal(dw, ref_dw)


def test_one_gradient_is_the_full_backwards():
    """A frozen head (or input): the other gradient's GEMM is skipped, the one asked for is
    the full backward's bit for bit (test_one_gradient.py on CPU)."""
    hidden, weight, labels = _inputs(300, 256, 9000, torch.bfloat16, seed=6)
    labels[labels < 0] = -100
    grads = {}
    for wants in ((True, True), (True, False), (False, True)):
        h = hidden.clone().requires_grad_(wants[0])
        w = weight.clone().requires_grad_(wants[1])
        lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7)
        (lp.sum() * 0.5 + ent.sum() * 0.25).backward()
        grads[wants] = (h.grad, w.grad)
    assert grads[(True, False)][1] is None and grads[(False, True)][0] is None
    assert torch.equal(grads[(True, False)][0], grads[(True, True)][0])
    assert torch.equal(grads[(False, True)][1], grads[(True, True)][1])


def test_forward_only_keeps_memory_small():
    """No grad: the forward allocates O(N) beyond its inputs (no logits, no buffers kept)."""
    hidden, weight, labels = _inputs(4096, 512, 32000, torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        lp, ent = linear_logprob_entropy(hidden, weight, labels.clamp_min(0), temperature=0.7)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    # per-split statistics (capped by PARTIAL_STATS_BUDGET_BYTES) and their merge
    assert extra < 64 * 2**20, f"forward allocated {extra / 2**20:.1f} MiB"


def test_cached_launch_specializes_like_triton():
    """kernels.launch.launch (compiled kernels kept under its own key, launched without
    JITFunction.run) against ``kernel[grid]`` on argument lists Triton compiles apart: an
    unaligned pointer, a length of 1 (compiled in as a constant), lengths divisible by 16 or
    not. Each list runs twice through ``launch`` (a miss, then a hit) and the outputs are
    bit for bit Triton's own launch's."""
    from megatron_overlay.ops.kernels import launch as launch_mod
    from megatron_overlay.ops.kernels.split_operand import SPLIT_BLOCK, split_kernel
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3 * SPLIT_BLOCK + 64, device="cuda", generator=g)
    for key in [k for k in launch_mod._compiled if k[0] == id(split_kernel)]:
        del launch_mod._compiled[key]  # other tests' entries
    # (offset into x in fp32 elements: 1 is unaligned, 4 is 16 bytes; length); the last
    # three reuse earlier keys: (4, 4099) (0, 17)'s, (0, 1) itself, (1, 17) (1, 4097)'s
    cases = [(0, 1), (0, 16), (0, 17), (1, 1), (1, 16), (1, 4097), (4, 2 * SPLIT_BLOCK + 3),
             (0, 1), (1, 17)]
    for offset, n in cases:
        src = x[offset:offset + n]
        grid = (-(-n // SPLIT_BLOCK),)
        want = torch.full((2, n + 1), 7.0, device="cuda", dtype=torch.bfloat16)
        split_kernel[grid](src, want[0], want[1], n, BLOCK=SPLIT_BLOCK)
        for attempt in ("miss", "hit"):
            got = torch.full((2, n + 1), 7.0, device="cuda", dtype=torch.bfloat16)
            before = len(launch_mod._compiled)
            launch_mod.launch(split_kernel, grid, src, got[0], got[1], n, BLOCK=SPLIT_BLOCK)
            if attempt == "hit":
                assert len(launch_mod._compiled) == before
            assert torch.equal(got, want), (offset, n, attempt)
    # one entry a specialization: the input aligned or not x the length 1, a multiple of
    # 16, or neither (the outputs' second rows are unaligned throughout)
    keys = [k for k in launch_mod._compiled if k[0] == id(split_kernel)]
    assert len(keys) == 6
    # TRITON_DEBUG switched (on, or off where the run has it on): a kernel of its own
    # (device asserts compiled in or out), not the one cached before
    from triton import knobs
    old = knobs.runtime.debug
    knobs.runtime.debug = not old
    src = x[:16]
    want = torch.full((2, 17), 7.0, device="cuda", dtype=torch.bfloat16)
    split_kernel[(1,)](src, want[0], want[1], 16, BLOCK=SPLIT_BLOCK)
    try:
        got = torch.full((2, 17), 7.0, device="cuda", dtype=torch.bfloat16)
        launch_mod.launch(split_kernel, (1,), src, got[0], got[1], 16, BLOCK=SPLIT_BLOCK)
    finally:
        knobs.runtime.debug = old
    debug_keys = [k for k in launch_mod._compiled if k[0] == id(split_kernel) and k not in keys]
    assert len(debug_keys) == 1 and debug_keys[0][-1][0] is (not old)
    assert torch.equal(got, want)


def test_direct_launches_are_tritons_launcher(monkeypatch):
    """kernels.launch's direct plans (Triton 3.6's C launcher called with the arguments its
    CudaLauncher makes, TMA descriptors' CUtensorMaps cached by what they encode) against
    ``compiled.run``: the log-prob op's forward and backward and the top-k (TMA and
    mixed-operand descriptors) give the same bits on inputs the descriptor cache has not
    seen (new values at new addresses while the old tensors live, another N, hidden
    states with a row stride of their own) and again on ones it has; every kernel this
    test launched got a plan where this Triton's launcher is the known one."""
    from megatron_overlay.ops import linear_topk_logprobs
    from megatron_overlay.ops.kernels import launch as launch_mod
    # this test's kernels and maps only (the process's caches come back after it)
    monkeypatch.setattr(launch_mod, "_compiled", {})
    monkeypatch.setattr(launch_mod, "_descriptor_maps", {})
    calls = {"plan": 0}
    real_args = launch_mod._descriptor_args

    def counted_args(desc, layout):
        calls["plan"] += 1
        return real_args(desc, layout)
    monkeypatch.setattr(launch_mod, "_descriptor_args", counted_args)

    def outputs(hidden, weight, labels):
        h = hidden.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7, ignore_index=-1)
        (lp.sum() + ent.sum()).backward()
        with torch.no_grad():
            top = linear_topk_logprobs(hidden, weight, 8, temperature=0.7)
        return (lp, ent, h.grad, w.grad, *top)

    def same_both_ways(hidden, weight, labels):
        monkeypatch.setattr(launch_mod, "direct", False)
        want = outputs(hidden, weight, labels)
        monkeypatch.setattr(launch_mod, "direct", True)
        got = outputs(hidden, weight, labels)
        for a, b in zip(want, got):
            if a is None:  # the top-k's entropy and log-prob at labels, not asked for
                assert b is None
            else:
                assert torch.equal(a, b)

    kept = []  # alive: a map keyed without the address would read these, not the new ones
    for hidden_dtype in (torch.bfloat16, torch.float32):
        for n, seed in ((300, 3), (300, 4), (77, 5)):
            hidden, weight, labels = _inputs(n, 256, 5003, torch.bfloat16, seed=seed)
            hidden = hidden.to(hidden_dtype)
            kept.append((hidden, weight))
            same_both_ways(hidden, weight, labels)
            same_both_ways(hidden, weight, labels)  # the maps of these addresses, hit
        wide = torch.randn(300, 512, device="cuda").to(hidden_dtype)
        same_both_ways(wide[:, :256], weight, _inputs(300, 256, 5003, torch.bfloat16)[2])
    entries = list(launch_mod._compiled.values())
    assert entries
    if not launch_mod._TRITON_LAUNCHER_KNOWN:
        assert all(entry[3] is None for entry in entries)
        pytest.skip(f"Triton {triton.__version__}: launches through compiled.run (direct "
                    f"plans know Triton 3.6's launcher); the same bits checked")
    missing = [entry[2].fn.__name__ for entry in entries if entry[3] is None]
    assert not missing, f"kernels without a direct plan: {missing}"
    if torch.cuda.get_device_capability()[0] >= 9:  # TMA: descriptors went through the maps
        assert calls["plan"] > 0 and launch_mod._descriptor_maps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                   torch.float8_e4m3fn])
def test_inverse_temperature_kernel_is_torchs_bit_for_bit(dtype):
    """Per-row temperatures: the Triton stage's one launch gives the torch form's inverse
    temperatures (temperature.inverse_rows: cast, within [MIN_TEMPERATURE,
    MAX_TEMPERATURE], 1 / T correctly rounded, else NaN) bit for bit; contiguous, strided
    and broadcast rows."""
    from megatron_overlay.ops.kernels import triton_impl
    from megatron_overlay.ops.temperature import MAX_TEMPERATURE, inverse_rows
    info = torch.finfo(torch.float32)
    above = float(torch.nextafter(torch.tensor(MAX_TEMPERATURE), torch.tensor(info.max)))
    g = torch.Generator(device="cuda").manual_seed(5)
    t = torch.exp(torch.randn(5000, device="cuda", generator=g, dtype=torch.float64) * 20)
    t[:16] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1e-30,
                           1e-45, 2.9e-39, info.tiny, 0.7, 1.0, 3e38, info.max, 1e-38,
                           MAX_TEMPERATURE, above])
    for rows in (t.to(dtype), torch.stack([t, t], 1).to(dtype)[:, 1],
                 torch.tensor(0.3, dtype=dtype, device="cuda").expand(9)):
        got, ref = triton_impl.inverse_temperature_rows(rows), inverse_rows(rows)
        assert got.dtype == torch.float32 and torch.equal(got.isnan(), ref.isnan())
        assert torch.equal(got.nan_to_num(), ref.nan_to_num())


@pytest.mark.parametrize("op", ["logprob", "at_ids", "topk"])
def test_a_sums_expanded_gradients_are_read_in_place(op):
    """A loss's sum() hands the ops its gradient expanded (stride 0): the backward reads
    it in place (no contiguous copy, a launch each), with the bits of the same gradients
    given contiguous."""
    from megatron_overlay.ops import linear_logprobs_at, linear_topk_logprobs
    hidden, weight, labels = _inputs(300, 264, 5003, torch.bfloat16, seed=3)
    ids = torch.randint(0, 5003, (300, 4), device="cuda")
    fn = {"logprob": lambda h, w: linear_logprob_entropy(h, w, labels.clamp_min(0),
                                                         temperature=0.7),
          "at_ids": lambda h, w: linear_logprobs_at(h, w, ids, temperature=0.7,
                                                    return_entropy=True),
          "topk": lambda h, w: linear_topk_logprobs(h, w, 4, temperature=0.7)[1:2]}[op]

    def grads(contiguous):
        h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
        outs = [o for o in fn(h, w) if o is not None]
        given = [torch.full_like(o, 0.25) if contiguous else
                 torch.full((), 0.25, device="cuda").expand_as(o) for o in outs]
        assert all(g.stride() == ((1,) if g.dim() == 1 else (g.shape[1], 1)) if contiguous
                   else all(s == 0 for s in g.stride()) for g in given)
        return torch.autograd.grad(outs, (h, w), given)

    for a, b in zip(grads(False), grads(True)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
