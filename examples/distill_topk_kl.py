#!/usr/bin/env python3
"""One top-k forward-KL distillation step between two GPTModels, with no logits anywhere.

The teacher gives its top-k ids and log-probs per token (``"fused_topk_logprobs"``, no
grad); the student gives its log-probs at those ids (``"fused_logprobs_at"``); the loss is
the forward KL restricted to the teacher's top-k,

    KL_k = sum_{i in top-k(teacher)} p_T(i) (log p_T(i) - log p_S(i)),

averaged over tokens, and backward reaches every student parameter. The same step through
the materialized logits checks the loss and the student's gradients. Runs on the GPU when
there is one, else on the CPU (megatron-core's own GPTModel, local layer spec, built by
megatron_overlay/model_builder.py), in an environment with megatron-core and the overlay, e.g. the one
`make demo` sets up:

    .venv/core-0.13.1/bin/python examples/distill_topk_kl.py [--k 8] [--tokens 1024] [--vocab 32000]
"""

from __future__ import annotations

import argparse
import sys

import torch

from megatron_overlay import model_builder
from megatron_overlay.utils.memory import PeakTensorMemory


def distill_step(teacher, student, batch, k: int, temperature: float) -> torch.Tensor:
    """The worked example: forward KL over the teacher's top-k, no [tokens x vocab] tensor."""
    input_ids, position_ids, mask = batch
    with torch.no_grad():
        top = teacher(input_ids, position_ids, mask, output_processor="fused_topk_logprobs",
                      output_processor_context={"k": k, "temperature": temperature})
    student_lp = student(input_ids, position_ids, mask, output_processor="fused_logprobs_at",
                         output_processor_context={"token_ids": top.topk_ids,
                                                   "temperature": temperature}).log_probs
    teacher_lp = top.topk_log_probs                       # [b, s, k]
    kl = (teacher_lp.exp() * (teacher_lp - student_lp)).sum(-1).mean()
    kl.backward()
    return kl.detach()


def materialized_step(teacher, student, batch, k: int, temperature: float) -> torch.Tensor:
    """The same loss from the full logits of both models (the reference)."""
    input_ids, position_ids, mask = batch
    with torch.no_grad():
        t_logp = torch.log_softmax(teacher(input_ids, position_ids, mask).float() / temperature,
                                   dim=-1)
        t_lp, ids = t_logp.topk(k, dim=-1)
    s_logp = torch.log_softmax(student(input_ids, position_ids, mask).float() / temperature,
                               dim=-1)
    kl = (t_lp.exp() * (t_lp - s_logp.gather(-1, ids))).sum(-1).mean()
    kl.backward()
    return kl.detach()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model_builder.init_distributed(0, 1, model_builder.free_port(), 1, device=device.type)
    seq, batch = args.tokens // 2, 2
    teacher_cfg = model_builder.ModelConfig(hidden=256, vocab=args.vocab, seq=seq, batch=batch)
    student_cfg = model_builder.ModelConfig(hidden=128, vocab=args.vocab, seq=seq, batch=batch)
    teacher = model_builder.build_model(teacher_cfg, seed=1, device=device.type)
    student = model_builder.build_model(student_cfg, seed=2, device=device.type)
    data = model_builder.batch(teacher_cfg, seed=0, device=device.type)[:3]  # ids, positions, mask

    results = {}
    for name, step in (("fused (no logits)", distill_step),
                       ("materialized logits", materialized_step)):
        student.zero_grad(set_to_none=True)
        with PeakTensorMemory(device) as peak:  # allocator bytes: repeatable, unlike RSS
            loss = step(teacher, student, data, args.k, args.temperature)
        grads = {n: p.grad.clone() for n, p in student.named_parameters() if p.grad is not None}
        results[name] = (loss, grads, peak.extra_bytes)
    (f_loss, f_grads, f_mem), (r_loss, r_grads, r_mem) = results.values()
    grad_err = max(((f_grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
                   for n, g in r_grads.items())
    print(f"teacher hidden 256, student hidden 128, vocab {args.vocab}, {batch}x{seq} tokens, "
          f"k={args.k}, T={args.temperature}, fp32, on {device.type}")
    print(f"top-k forward KL: fused {f_loss.item():.6f}, materialized {r_loss.item():.6f}")
    print(f"student gradients: {len(f_grads)} tensors, max relative difference {grad_err:.2e}")
    print(f"peak extra memory: fused {f_mem / 2**20:.1f} MiB, materialized {r_mem / 2**20:.1f} MiB "
          f"(torch's allocator; one logits tensor is "
          f"{batch * seq * args.vocab * 4 / 2**20:.0f} MiB in fp32)")
    model_builder.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
