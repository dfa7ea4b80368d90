"""The fused log-probs on bf16 tensors are an fp32 LM head's, not a bf16 head's; and the
other heads on request: ``logits_dtype`` rounds each logit as a bf16 (fp16) head does, and
mixed operands (fp32 with 16-bit) are an fp32 head without a converted copy.

RL frameworks compare the rollout engine's log-probs with the trainer's, and most of the gap
comes from the LM head: a bf16 head rounds every logit to bf16 before the softmax (NeMo-RL
#3936). The fused op never materializes the logits, so it never rounds them: this checks
that on flat and peaked logits, T = 1 and 0.7, with labels sampled from the softmax as
rollout tokens are (errors against an fp64 head; "mult. error" = mean |exp(lp - lp_ref) - 1|,
the figure NeMo-RL logs between engines). CPU: the chunked torch path at a small size. GPU
(skipped without one): the Triton kernels at the output layer of a 7B model, against the
TF32 head (the one NeMo-RL ships as numerically identical to fp32) and the fp32 head; and
the Triton kernels in each mode (rounded logits, fp32 hidden states or weight) against
fp64, gradients and the distillation ops among them.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from megatron_overlay.ops import linear_logprob_entropy, linear_logprobs_at, linear_topk_logprobs
# not bf16-exact fp32 operands (so the kernels' hi + lo split is exercised), as the benchmark's
from tools.bench.inputs import fp32_copy

LOGIT_STD = {"flat": 1.4, "peaked": 4.0}  # std of hidden @ W.T before the temperature
CASES = [(logits, t) for logits in LOGIT_STD for t in (1.0, 0.7)]


def _case(n, h, v, logits, t, device):
    """bf16 hidden [n, h] and weight [v, h]; labels sampled from the fp64 softmax at T."""
    g = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(n, h, device=device, generator=g).bfloat16()
    weight = (torch.randn(v, h, device=device, generator=g) * LOGIT_STD[logits] / h ** 0.5
              ).bfloat16()
    logp64 = torch.log_softmax(hidden.double() @ weight.double().T / t, -1)
    labels = torch.multinomial(logp64.exp(), 1, generator=g)[:, 0]
    return hidden, weight, labels, logp64.gather(1, labels[:, None])[:, 0]


def _head(hidden, weight, labels, t, dtype, tf32=False):
    """The materialized head: logits = hidden @ W.T in ``dtype``, then fp32 log_softmax."""
    matmul, before = torch.backends.cuda.matmul, torch.backends.cuda.matmul.allow_tf32
    matmul.allow_tf32 = tf32
    try:
        logits = (hidden.to(dtype) @ weight.to(dtype).T).float() / t
    finally:
        matmul.allow_tf32 = before
    return torch.log_softmax(logits, -1).gather(1, labels[:, None])[:, 0].double()


def _errors(lp, ref64, fp32_head):
    return ((lp.double() - ref64).abs().mean().item(),
            (lp.double() - fp32_head).exp().sub(1).abs().mean().item())


@pytest.mark.parametrize("logits,t", CASES)
def test_torch_path_is_an_fp32_head_on_bf16_tensors(logits, t):
    hidden, weight, labels, ref64 = _case(256, 256, 4096, logits, t, "cpu")
    fp32_head = _head(hidden, weight, labels, t, torch.float32)
    ours = linear_logprob_entropy(hidden, weight, labels, temperature=t)[0]
    bf16_err, _ = _errors(_head(hidden, weight, labels, t, torch.bfloat16), ref64, fp32_head)
    fp32_err, _ = _errors(fp32_head, ref64, fp32_head)
    err, mult = _errors(ours, ref64, fp32_head)
    # measured (2-core CPU): ours 1.05-1.35x the fp32 head's error, 1/18-1/27 of the bf16 head's
    assert mult <= 5e-5
    assert err <= 2 * fp32_err and err <= bf16_err / 10, (err, fp32_err, bf16_err)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Triton kernels)")
@pytest.mark.parametrize("logits,t", CASES)
def test_triton_path_matches_the_tf32_and_fp32_heads(logits, t):
    hidden, weight, labels, ref64 = _case(2048, 4096, 151936, logits, t, "cuda")
    fp32_head = _head(hidden, weight, labels, t, torch.float32)
    tf32_err, _ = _errors(_head(hidden, weight, labels, t, torch.float32, tf32=True), ref64,
                          fp32_head)
    ours = linear_logprob_entropy(hidden, weight, labels, temperature=t)[0]
    err, mult = _errors(ours, ref64, fp32_head)
    print(f"{logits} T={t}: ours {err:.2e} (mult. {mult:.2e}), TF32 head {tf32_err:.2e}")
    assert err <= tf32_err, (err, tf32_err)
    assert mult <= 5e-5


def _straight_through(hidden, weight, labels, t, logits_dtype):
    """fp64 autograd reference of the op with ``logits_dtype``: log-probs and entropy of the
    rounded logits, the gradient passing through the rounding as through a cast."""
    h, w = hidden.double().requires_grad_(), weight.double().requires_grad_()
    z = h @ w.T
    if logits_dtype is not None:
        z = z + (z.float().to(logits_dtype).double() - z).detach()
    logp = torch.log_softmax(z / t, -1)
    return h, w, logp.gather(1, labels[:, None])[:, 0], -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("logits,t", CASES)
def test_logits_dtype_bfloat16_reproduces_the_bf16_head(logits, t):
    hidden, weight, labels, ref64 = _case(256, 256, 4096, logits, t, "cpu")
    bf16_head = _head(hidden, weight, labels, t, torch.bfloat16)
    fp32_head = _head(hidden, weight, labels, t, torch.float32)
    ours = linear_logprob_entropy(hidden, weight, labels, temperature=t,
                                  logits_dtype=torch.bfloat16)[0].double()
    bf16_err = (bf16_head - ref64).abs().mean().item()
    assert (ours - bf16_head).abs().mean().item() <= bf16_err / 10
    assert (ours - fp32_head).abs().mean().item() >= bf16_err / 2  # it did round


@pytest.mark.parametrize("logits_dtype", [torch.bfloat16, torch.float16])
def test_rounded_logits_gradients_pass_through_the_rounding(logits_dtype):
    # fp32 operands (so the gradients are not rounded on the way out), T = 0.7
    hidden, weight, labels, _ = _case(96, 64, 3000, "peaked", 0.7, "cpu")
    hidden, weight = hidden.float(), weight.float()
    h64, w64, lp64, ent64 = _straight_through(hidden, weight, labels, 0.7, logits_dtype)
    (lp64.sum() * 0.3 + ent64.sum() * 0.7).backward()
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7, logits_dtype=logits_dtype)
    (lp.sum() * 0.3 + ent.sum() * 0.7).backward()
    torch.testing.assert_close(lp.double(), lp64.detach(), rtol=0, atol=1e-4)
    torch.testing.assert_close(ent.double(), ent64.detach(), rtol=0, atol=1e-4)
    for got, ref in ((h.grad, h64.grad), (w.grad, w64.grad)):
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() < 1e-4


def test_distillation_ops_take_the_rounding_too():
    hidden, weight, labels, _ = _case(64, 128, 2048, "peaked", 1.0, "cpu")
    logp = torch.log_softmax((hidden @ weight.T).float(), -1)  # the bf16 head's
    top = linear_topk_logprobs(hidden, weight, 8, logits_dtype="bfloat16")
    values = logp.gather(1, top.topk_ids)
    torch.testing.assert_close(top.topk_log_probs, values, rtol=0, atol=1e-5)
    assert torch.equal(values, logp.topk(8).values)  # the 8 largest (ties: any of them)
    at, _ = linear_logprobs_at(hidden, weight, top.topk_ids, logits_dtype="bfloat16")
    torch.testing.assert_close(at, values, rtol=0, atol=1e-5)


@pytest.mark.parametrize("hidden_dtype,weight_dtype", [(torch.float32, torch.bfloat16),
                                                       (torch.bfloat16, torch.float32),
                                                       (torch.float32, torch.float16)])
def test_mixed_operands_are_an_fp32_head(hidden_dtype, weight_dtype):
    # an fp32 residual stream with a 16-bit head weight, or a 16-bit model with an fp32
    # head weight: fp32 products of the operands as given (no cast to one dtype)
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(128, 256, generator=g).to(hidden_dtype)
    weight = (torch.randn(4096, 256, generator=g) * 4 / 16).to(weight_dtype)
    labels = torch.randint(0, 4096, (128,), generator=g)
    h64, w64 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    logp = torch.log_softmax(h64 @ w64.T / 0.7, -1)
    lp64, ent64 = logp.gather(1, labels[:, None])[:, 0], -(logp.exp() * logp).sum(-1)
    (lp64.sum() + ent64.sum()).backward()
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7)
    (lp.sum() + ent.sum()).backward()
    assert (lp.double() - lp64).abs().mean().item() <= 5e-6
    assert (ent.double() - ent64).abs().max().item() <= 1e-4
    assert h.grad.dtype == hidden_dtype and w.grad.dtype == weight_dtype
    for got, ref in ((h.grad, h64.grad), (w.grad, w64.grad)):
        tol = 1e-5 if got.dtype == torch.float32 else 1e-2  # a 16-bit gradient is rounded
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() < tol


def test_other_dtype_pairs_and_logits_dtypes_are_refused():
    hidden, weight = torch.randn(4, 8).bfloat16(), torch.randn(16, 8).half()
    labels = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"hidden \(torch.bfloat16\) and weight "
                                        r"\(torch.float16\).*or one of them be float32"):
        linear_logprob_entropy(hidden, weight, labels)
    with pytest.raises(TypeError, match="logits_dtype must be None or torch.float32"):
        linear_logprob_entropy(hidden, weight.bfloat16(), labels, logits_dtype=torch.int8)
    with pytest.raises(TypeError, match="logits_dtype"):
        linear_topk_logprobs(hidden, weight.bfloat16(), 2, logits_dtype="fp8")


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Triton kernels)")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("logits,t", CASES)
def test_triton_logits_dtype_bfloat16_reproduces_the_bf16_head(logits, t):
    hidden, weight, labels, ref64 = _case(2048, 4096, 151936, logits, t, "cuda")
    bf16_head = _head(hidden, weight, labels, t, torch.bfloat16)
    ours = linear_logprob_entropy(hidden, weight, labels, temperature=t,
                                  logits_dtype=torch.bfloat16)[0].double()
    bf16_err = (bf16_head - ref64).abs().mean().item()
    gap = (ours - bf16_head).abs().mean().item()
    print(f"{logits} T={t}: |ours - bf16 head| {gap:.2e}, bf16 head's error {bf16_err:.2e}")
    assert gap <= bf16_err / 10


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("operand", ["hidden", "weight"])
@pytest.mark.parametrize("logits,t", CASES)
def test_triton_mixed_operands_are_an_fp32_head(operand, logits, t):
    hidden, weight, labels, _ = _case(2048, 4096, 151936, logits, t, "cuda")
    if operand == "hidden":
        hidden = fp32_copy(hidden, 1)
    else:
        weight = fp32_copy(weight, 2)
    ref64 = torch.log_softmax(hidden.double() @ weight.double().T / t, -1).gather(
        1, labels[:, None])[:, 0]
    ours = linear_logprob_entropy(hidden, weight, labels, temperature=t)[0]
    err = (ours.double() - ref64).abs().mean().item()
    # the cast to one dtype that the modes replace: the fp32 operand rounded to bf16
    cast = linear_logprob_entropy(hidden.bfloat16(), weight.bfloat16(), labels,
                                  temperature=t)[0]
    cast_err = (cast.double() - ref64).abs().mean().item()
    print(f"fp32 {operand}, {logits} T={t}: ours {err:.2e}, a bf16 cast {cast_err:.2e}")
    assert err <= 5e-5 and err <= cast_err / 10


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", ["bfloat16", "float16", "fp32 hidden", "fp32 weight"])
def test_triton_modes_gradients_and_distillation_ops(mode):
    # fp64 references (straight-through the rounding); a 16-bit gradient is rounded once
    hidden, weight, labels, _ = _case(1024, 1024, 32768, "peaked", 0.7, "cuda")
    logits_dtype = getattr(torch, mode, None)
    if mode == "fp32 hidden":
        hidden = fp32_copy(hidden, 3)
    elif mode == "fp32 weight":
        weight = fp32_copy(weight, 4)
    h64, w64, lp64, ent64 = _straight_through(hidden, weight, labels, 0.7, logits_dtype)
    (lp64.sum() * 0.3 + ent64.sum() * 0.7).backward()
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprob_entropy(h, w, labels, temperature=0.7, logits_dtype=logits_dtype)
    (lp.sum() * 0.3 + ent.sum() * 0.7).backward()
    assert (lp.double() - lp64).abs().mean().item() <= 5e-5
    assert (ent.double() - ent64).abs().mean().item() <= 5e-5
    assert h.grad.dtype == hidden.dtype and w.grad.dtype == weight.dtype
    for got, ref in ((h.grad, h64.grad), (w.grad, w64.grad)):
        # d(logits) is rounded to the 16-bit dtype before the gradient GEMMs, as bf16 ops' is
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() < 2e-2
        assert ((got.double() - ref).norm() / ref.norm()).item() < 4e-3
    if mode.startswith("fp32"):
        # the 16-bit operand's gradient GEMM takes the fp32 operand's hi half only
        # (autotune_configs.MIXED_GRAD16_WITH_LO): about as accurate as with the lo half
        got, ref = (w.grad, w64.grad) if mode == "fp32 hidden" else (h.grad, h64.grad)
        from megatron_overlay.ops.kernels import autotune_configs
        h2, w2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with mock.patch.object(autotune_configs, "MIXED_GRAD16_WITH_LO", 1):
            lp2, ent2 = linear_logprob_entropy(h2, w2, labels, temperature=0.7)
            (lp2.sum() * 0.3 + ent2.sum() * 0.7).backward()
        with_lo = w2.grad if mode == "fp32 hidden" else h2.grad
        err, err_lo = ((g.double() - ref).norm().item() / ref.norm().item()
                       for g in (got, with_lo))
        print(f"{mode}: 16-bit gradient {err:.3e} (hi only), {err_lo:.3e} (hi + lo)")
        assert err <= 1.35 * err_lo
    z64 = h64.detach() @ w64.detach().T  # T = 1
    if logits_dtype is not None:
        z64 = z64.float().to(logits_dtype).double()
    logp = torch.log_softmax(z64, -1)
    # A rounded logit whose fp32 sum (in another order than fp64's) lies at a rounding
    # boundary may round the other way: one ulp of that logit, for a few of them
    ulp = torch.finfo(logits_dtype).eps * z64.abs().max().item() if logits_dtype else 0.0
    mean_tol = 1e-4 if logits_dtype else 5e-5
    top = linear_topk_logprobs(hidden, weight, 8, logits_dtype=logits_dtype)
    values = logp.gather(1, top.topk_ids)
    at, _ = linear_logprobs_at(hidden, weight, top.topk_ids, logits_dtype=logits_dtype)
    for got in (top.topk_log_probs, at):
        err = (got.double() - values).abs()
        assert err.mean().item() <= mean_tol and err.max().item() <= 2e-4 + ulp
    assert (values.min(1).values >= logp.topk(8).values[:, -1] - 1e-4 - ulp).all()
