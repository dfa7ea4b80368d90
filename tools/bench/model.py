"""Fused log-probs against the logits path in a megatron-core GPTModel (one device).

A Qwen2.5-0.5B-shaped GPTModel (24 layers, hidden 896, 14 heads / 2 KV groups, FFN 4864,
RMSNorm, SwiGLU, RoPE, tied embeddings, vocab 151936), random weights, bf16, megatron-core's
local spec, built by megatron_overlay.model_builder, batch 4 x 2048, temperature 0.7. Two
paths on the same batch:

  logits  model(...) -> [b, s, V] logits -> fp32 log_softmax(logits / T) -> gather, entropy
  fused   model(..., labels=, output_processor="fused_logprob", output_processor_context={T})

For each: forward without grad and a training step (forward, loss
``-(log_probs * adv).mean() - 0.01 * entropy.mean()``, backward): peak memory, and the time
of single synchronized calls, the paths interleaved round by round (tools/bench/timing.py,
median over rounds); and the largest |log-prob difference| between the paths.
``--device cpu``: a smoke run at the builder's tiny size (fp32, gloo), not a benchmark.

    python -m tools.bench model --out out/bench_model
    python -m tools.bench model --layers 2 --seq 256 --vocab 4096 --rounds 2   # a quick look

Needs megatron-core >= 0.18 (the ``output_processor`` argument; 0.12-0.17 patched by the
overlay).
"""

from __future__ import annotations

from importlib.metadata import version

import torch
import torch.nn.functional as F

from megatron_overlay import model_builder

from . import timing
from .inputs import TEMPERATURE
from .methods import GiB
from .report import Run, markdown

QWEN_0_5B = dict(num_query_groups=2, ffn_hidden_size=4864, kv_channels=64,
                 normalization="RMSNorm", layernorm_epsilon=1e-6, gated_linear_unit=True,
                 activation_func=F.silu, add_bias_linear=False, add_qkv_bias=True,
                 init_method_std=0.02)


def add_arguments(p):
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, help="default 4 (cuda), the builder's tiny batch (cpu)")
    p.add_argument("--seq", type=int, help="default 2048 (cuda)")
    p.add_argument("--layers", type=int, help="default 24 (cuda)")
    p.add_argument("--vocab", type=int, help="default 151936 (cuda)")
    p.add_argument("--rounds", "--repeats", type=int, default=5)


def build(args):
    sizes = {k: getattr(args, k) for k in ("batch", "seq", "layers", "vocab")
             if getattr(args, k) is not None}
    if args.device == "cpu":
        cfg = model_builder.ModelConfig(**sizes)
        return model_builder.build_model(cfg, device="cpu"), cfg
    cfg = model_builder.ModelConfig(**{"batch": 4, "seq": 2048, "layers": 24, "vocab": 151936,
                                       **sizes}, hidden=896, heads=14, dtype=torch.bfloat16,
                                      rotary_base=1_000_000)
    spec = model_builder.layer_spec(normalization="RMSNorm")
    return model_builder.build_model(cfg, device="cuda", spec=spec, **QWEN_0_5B), cfg


def main(args, argv) -> int:
    if args.device == "cuda" and not torch.cuda.is_available():
        args.parser.error("needs a CUDA GPU (--device cpu runs a smoke run without one)")
    run = Run(args, argv)
    model_builder.init_distributed(0, 1, model_builder.free_port(), 1, device=args.device)
    model, cfg = build(args)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg, device=args.device)
    adv = torch.randn(cfg.batch, cfg.seq, generator=torch.Generator().manual_seed(0)).to(
        args.device)
    cuda = args.device == "cuda"

    def logits_path():
        logits = model(input_ids, position_ids, mask)  # [b, s, V]
        logp = torch.log_softmax(logits.float() / TEMPERATURE, dim=-1)
        lp = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        return lp, -(logp.exp() * logp).sum(-1)

    def fused_path():
        out = model(input_ids, position_ids, mask, labels=labels, output_processor="fused_logprob",
                    output_processor_context={"temperature": TEMPERATURE})
        return out.log_probs, out.entropy

    def forward(path):
        with torch.no_grad():
            return path()

    def step(path):
        lp, ent = path()
        (-(lp * adv).mean() - 0.01 * ent.mean()).backward()
        model.zero_grad(set_to_none=True)
        return lp.detach(), ent.detach()

    calls = {f"{name}_{kind}": (lambda run_=run_, path=path: run_(path))
             for name, path in (("logits", logits_path), ("fused", fused_path))
             for kind, run_ in (("forward", forward), ("step", step))}
    results = {"meta": {**run.meta, "megatron_core": version("megatron-core"),
                        "batch": cfg.batch, "seq": cfg.seq, "layers": cfg.layers,
                        "vocab": cfg.vocab}}
    outputs = {}
    for key, call in calls.items():  # warm-up, outputs, peak memory (one call at a time)
        call()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        outputs[key] = [t.float() for t in call()]
        if cuda:
            torch.cuda.synchronize()
            results[f"{key}_peak_gib"] = torch.cuda.max_memory_allocated() / GiB
    times = timing.interleaved(calls, [()], args.rounds, single=True, heat_s=0, warmup_calls=0,
                               cuda=cuda, log=run.log)
    for key, t in times.items():
        results[f"{key}_ms"] = t.median_ms
        results[f"{key}_ms_rounds"] = [round(x, 3) for x in t.ms]
    for i, name in enumerate(("logprob", "entropy")):
        results[f"max_{name}_diff"] = (outputs["fused_forward"][i]
                                       - outputs["logits_forward"][i]).abs().max().item()
    model_builder.shutdown()
    run.write("results.json", results)
    lines = markdown(("path", "forward (no grad) ms", "forward peak GiB", "step ms",
                      "step peak GiB"),
                     [(name, f"{results[f'{name}_forward_ms']:.1f}",
                       f"{results.get(f'{name}_forward_peak_gib', float('nan')):.2f}",
                       f"{results[f'{name}_step_ms']:.1f}",
                       f"{results.get(f'{name}_step_peak_gib', float('nan')):.2f}")
                      for name in ("logits", "fused")])
    lines += (f"\n\nmax |log-prob difference| {results['max_logprob_diff']:.2e}, "
              f"max |entropy difference| {results['max_entropy_diff']:.2e}")
    run.log(lines)
    (run.out / "table.md").write_text(lines + "\n")
    return 0
