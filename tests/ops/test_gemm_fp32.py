"""The fp32-output GEMMs of the Triton backward (ops/kernels/gemm_fp32.py), on CPU.

Whether ``torch.mm`` / ``torch.addmm`` take ``out_dtype=torch.float32`` is decided once, by
a probe on tiny tensors. A CUDA out-of-memory error (a RuntimeError) must reach the caller
and decide nothing: the fast path stays on. The GPU branch runs here on a CPU tensor that
says it is on CUDA, with torch.mm / torch.addmm replaced by fakes that can fail on cue.
"""

from __future__ import annotations

import pytest
import torch

from megatron_overlay.ops.kernels import gemm_fp32


class _CudaLooking(torch.Tensor):
    """A CPU tensor that reports ``is_cuda``: gemm_fp32.matmul_fp32's GPU branch on a CPU."""

    @property
    def is_cuda(self):
        return True


def _operands(accumulate: bool):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, 3, generator=g).to(torch.bfloat16).as_subclass(_CudaLooking)
    b = torch.randn(3, 4, generator=g).to(torch.bfloat16).as_subclass(_CudaLooking)
    out = torch.randn(5, 4, generator=g) if accumulate else torch.zeros(5, 4)
    expected = a.float() @ b.float() + (out if accumulate else 0)
    return a, b, out, torch.Tensor(expected)


class _FakeGemms:
    """torch.mm / torch.addmm with ``out_dtype`` (exact fp32 products); ``fail`` maps a call
    number (1, 2, ...) to the error that call raises; ``calls`` logs (name, out_dtype)."""

    def __init__(self, fail: dict[int, Exception]):
        self.fail, self.count, self.calls = fail, 0, []

    def _call(self, name, product, out_dtype, out):
        self.count += 1
        self.calls.append((name, out_dtype))
        if self.count in self.fail:
            raise self.fail[self.count]
        result = product.float() if out_dtype == torch.float32 else product
        if out is None:
            return result
        out.copy_(result)
        return out

    def mm(self, a, b, *, out_dtype=None, out=None):
        return self._call("mm", a.float() @ b.float(), out_dtype, out)

    def addmm(self, c, a, b, *, out_dtype=None, out=None):
        return self._call("addmm", c.float() + a.float() @ b.float(), out_dtype, out)


@pytest.fixture
def gemms(monkeypatch):
    gemm_fp32.out_dtype_supported.cache_clear()

    def install(fail=None):
        fake = _FakeGemms(fail or {})
        monkeypatch.setattr(torch, "mm", fake.mm)
        monkeypatch.setattr(torch, "addmm", fake.addmm)
        return fake

    yield install
    gemm_fp32.out_dtype_supported.cache_clear()


def _oom():
    return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("failing_call", [1, 2], ids=["in-the-probe", "in-the-gemm"])
def test_an_oom_propagates_and_the_fast_path_stays_on(gemms, accumulate, failing_call):
    form = "addmm" if accumulate else "mm"
    fake = gemms(fail={failing_call: _oom()})
    a, b, out, expected = _operands(accumulate)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        gemm_fp32.matmul_fp32(a, b, out.clone(), accumulate=accumulate)
    # the next call takes the fp32-output path: torch.<form>(..., out_dtype=float32)
    fake.calls.clear()
    got = out.clone()
    gemm_fp32.matmul_fp32(a, b, got, accumulate=accumulate)
    assert fake.calls[-1] == (form, torch.float32), fake.calls
    torch.testing.assert_close(got, expected)
    assert gemm_fp32.out_dtype_supported(form, torch.bfloat16, a.device)


def test_a_refusal_turns_the_form_off_once(gemms):
    fake = gemms(fail={1: TypeError("mm() got an unexpected keyword argument 'out_dtype'")})
    a, b, out, expected = _operands(accumulate=False)
    gemm_fp32.matmul_fp32(a, b, out, accumulate=False)
    torch.testing.assert_close(out, expected)  # the product, rounded once to bf16
    assert fake.calls == [("mm", torch.float32), ("mm", None)]
    fake.calls.clear()
    gemm_fp32.matmul_fp32(a, b, out, accumulate=False)
    assert fake.calls == [("mm", None)]  # decided: no second probe


@pytest.mark.parametrize("form", gemm_fp32.FORMS)
def test_the_probe_runs_against_torch_itself(form):
    """The probe's own call is well-formed (a TypeError would read as "unsupported"):
    torch's meta backend has the out_dtype forms, its CPU backend has not (torch 2.13)."""
    gemm_fp32.out_dtype_supported.cache_clear()
    try:
        assert gemm_fp32.out_dtype_supported(form, torch.bfloat16, torch.device("meta"))
        assert not gemm_fp32.out_dtype_supported(form, torch.bfloat16, torch.device("cpu"))
    finally:
        gemm_fp32.out_dtype_supported.cache_clear()
