"""Fused log-probs against the logits path in a megatron-core GPTModel or hybrid model.

gpt (default): a Qwen2.5-0.5B-shaped GPTModel (QWEN_0_5B; 24 layers, vocab 151936), random
bf16 weights, batch 4 x 2048, T = 0.7; the logits path (model(...) -> fp32
log_softmax(logits / T) -> gather, entropy) against ``output_processor="fused_logprob"``:
each one's forward without grad and training step (loss ``-(log_probs * adv).mean() - 0.01 *
entropy.mean()``, backward), peak memory and the median of single synchronized calls,
interleaved round by round; and the largest |log-prob difference| between the paths.

``--model hybrid``: megatron's hybrid model (MambaModel / HybridModel, attention and MLP
layers; megatron_overlay/model_builder.py), tied and untied (cuda: bf16, hidden 2048, 2
layers, vocab 151936, 4 x 2048 tokens): "fused_logprob" by name against
``model_builder.logits_path_logprob``, each followed by backward of one random combination
of log-probs and entropy: max abs differences of log-probs, entropy and every gradient
(relative to its largest entry), in bf16 also against an fp32 head; on cuda each path's
fwd+bwd time and peak extra memory. Writes hybrid_check.json (the compatibility matrix's
check). ``--device cpu``: the builder's tiny fp32 model (gloo), not a benchmark. Needs
megatron-core >= 0.18 (0.12-0.17 patched by the overlay).

    python -m tools.bench model --out out/bench_model
    python -m tools.bench model --layers 2 --seq 256 --vocab 4096 --rounds 2   # a quick look
    python -m tools.bench model --model hybrid --device cuda --out DIR
"""

from __future__ import annotations

import json
from importlib.metadata import version

import torch
import torch.nn.functional as F

from megatron_overlay import model_builder

from . import timing
from .inputs import TEMPERATURE
from .methods import GiB, peak_extra_gib
from .report import Run, markdown

QWEN_0_5B = dict(num_query_groups=2, ffn_hidden_size=4864, kv_channels=64,
                 normalization="RMSNorm", layernorm_epsilon=1e-6, gated_linear_unit=True,
                 activation_func=F.silu, add_bias_linear=False, add_qkv_bias=True,
                 init_method_std=0.02)


def add_arguments(p):
    p.add_argument("--model", default="gpt", choices=["gpt", "hybrid"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, help="default 4 (cuda), the builder's tiny batch (cpu)")
    p.add_argument("--seq", type=int, help="default 2048 (cuda)")
    p.add_argument("--layers", type=int, help="default 24 (gpt, cuda), 2 (hybrid)")
    p.add_argument("--vocab", type=int, help="default 151936 (cuda)")
    p.add_argument("--rounds", "--repeats", type=int, default=5)


def _sizes(args):
    return {k: getattr(args, k) for k in ("batch", "seq", "layers", "vocab")
            if getattr(args, k) is not None}


def build(args):
    sizes = _sizes(args)
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
    if args.model == "hybrid":
        report = {**run.meta, "megatron_core": version("megatron-core"), "configs": {
            ("tied" if tied else "untied"): hybrid_check(args, tied) for tied in (True, False)}}
        model_builder.shutdown()
        run.log(json.dumps(report, indent=1))
        run.write("hybrid_check.json", report)
        return 0
    model, cfg = build(args)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg, device=args.device)
    adv = torch.randn(cfg.batch, cfg.seq, generator=torch.Generator().manual_seed(0)).to(
        args.device)
    cuda = args.device == "cuda"

    def logits_path():
        logits = model(input_ids, position_ids, mask)  # [b, s, V]
        return model_builder.logprob_entropy(logits, labels, TEMPERATURE)

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


def fp32_head_logprob(*, hidden_states, output_layer, output_weight, labels, context, **_):
    """The fp32-head reference processor (TP 1): hidden states and weight upcast."""
    weight = output_layer.weight if output_weight is None else output_weight
    logits = torch.nn.functional.linear(hidden_states.float(), weight.float())  # [s, b, v]
    picked, entropy = model_builder.logprob_entropy(logits, labels.transpose(0, 1),
                                                    context["temperature"])
    return {"log_probs": picked.transpose(0, 1), "entropy": entropy.transpose(0, 1)}


def differences(got, ref) -> dict:
    """Max and mean abs differences of (log-probs, entropy, grads); the max gradient
    difference relative to the gradient's largest entry."""
    return {"log_probs_max_abs": (got[0] - ref[0]).abs().max().item(),
            "log_probs_mean_abs": (got[0] - ref[0]).abs().mean().item(),
            "entropy_max_abs": (got[1] - ref[1]).abs().max().item(),
            "grad_max_rel": max(((got[2][k] - g).abs().max() / g.abs().max().clamp(
                min=1e-30)).item() for k, g in ref[2].items())}


def hybrid_check(args, tied: bool) -> dict:
    """One row of ``--model hybrid``: fused vs the logits path (and an fp32 head in bf16)."""
    if args.device == "cpu":
        cfg = model_builder.ModelConfig(model="hybrid", tied=tied, **_sizes(args))
    else:
        cfg = model_builder.ModelConfig(**{"vocab": 151936, "seq": 2048, "batch": 4,
                                           **_sizes(args)}, model="hybrid", tied=tied,
                                        hidden=2048, heads=16, dtype=torch.bfloat16)
    model = model_builder.build_model(cfg, device=args.device)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg, device=args.device)
    gen = torch.Generator().manual_seed(7)
    coeffs = [torch.randn(cfg.batch, cfg.seq, generator=gen).to(args.device) for _ in range(2)]

    def step(processor):
        out = model(input_ids, position_ids, mask, labels=labels, output_processor=processor,
                    output_processor_context={"temperature": TEMPERATURE})
        ((out["log_probs"] * coeffs[0]).sum() + (out["entropy"] * coeffs[1]).sum()).backward()
        grads = {k: g.float() for k, g in model_builder.grads(model).items()}
        model.zero_grad(set_to_none=True)
        return out["log_probs"].detach().float(), out["entropy"].detach().float(), grads

    paths = {"fused": "fused_logprob", "logits_path": model_builder.logits_path_logprob}
    fused, ref = (step(p) for p in paths.values())
    row = {"class": type(model).__name__, "tokens": cfg.batch * cfg.seq, "vocab": cfg.vocab,
           "hidden": cfg.hidden, "dtype": str(cfg.dtype), **differences(fused, ref),
           "n_grads": len(ref[2])}
    if cfg.dtype != torch.float32:  # the logits path's own rounding, told apart
        fp32 = step(fp32_head_logprob)
        row["vs_fp32_head"] = {"fused": differences(fused, fp32),
                               "logits_path": differences(ref, fp32)}
    if args.device == "cuda":  # single synchronized calls, the first (compiling) not timed
        for name, p in paths.items():
            got = timing.interleaved({"call": lambda p=p: step(p)}, [()], args.rounds,
                                     single=True, heat_s=0, warmup_calls=1)["call"]
            row[name] = {"fwd_bwd_ms": got.median_ms, "peak_extra_mib": 1024 * peak_extra_gib(
                lambda _, p=p: step(p), (coeffs[0],))}
    return row
