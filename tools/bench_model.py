#!/usr/bin/env python3
"""Model-level benchmark: fused log-probs vs the logits path in a megatron-core GPTModel.

A Qwen2.5-0.5B-shaped GPTModel (24 layers, hidden 896, 14 heads / 2 KV groups, FFN 4864,
RMSNorm, SwiGLU, RoPE, tied embeddings, vocab 151936), random weights, bf16, megatron-core's
local spec, one GPU, batch 4 x 2048, temperature 0.7. Two paths on the same batch:

  logits  model(...) -> [b, s, V] logits -> fp32 log_softmax(logits / T) -> gather, entropy
  fused   model(..., labels=, output_processor=fused_logprob, output_processor_context={T})

For each: forward without grad (time, peak memory) and a training step (forward, loss
``-(log_probs * adv).mean() - 0.01 * entropy.mean()``, backward): median step time over
repeats, peak memory; and the largest |log-prob difference| between the paths.

    python tools/bench_model.py --out out/bench_model

Needs megatron-core >= 0.18 (the ``output_processor`` argument; 0.12-0.17 patched by the
overlay) and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEMPERATURE = 0.7
GiB = float(1 << 30)


def build(args):
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)
    torch.manual_seed(1234)
    config = TransformerConfig(
        num_layers=args.layers, hidden_size=896, num_attention_heads=14, num_query_groups=2,
        ffn_hidden_size=4864, kv_channels=64, normalization="RMSNorm", layernorm_epsilon=1e-6,
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        add_qkv_bias=True, hidden_dropout=0.0, attention_dropout=0.0,
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        init_method_std=0.02,
    )
    model = GPTModel(
        config=config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=args.vocab, max_sequence_length=args.seq, pre_process=True,
        post_process=True, share_embeddings_and_output_weights=True,
        position_embedding_type="rope", rotary_base=1_000_000, parallel_output=True,
    ).cuda()
    return model


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/bench_model")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    from megatron_overlay.processors.fused_logprob import fused_logprob

    model = build(args)
    g = torch.Generator(device="cuda").manual_seed(0)
    b, s = args.batch, args.seq
    input_ids = torch.randint(0, args.vocab, (b, s), device="cuda", generator=g)
    labels = torch.randint(0, args.vocab, (b, s), device="cuda", generator=g)
    position_ids = torch.arange(s, device="cuda").unsqueeze(0).expand(b, -1)
    adv = torch.randn(b, s, device="cuda", generator=g)

    def logits_path():
        logits = model(input_ids, position_ids, None)  # [b, s, V] bf16
        logp = torch.log_softmax(logits.float() / TEMPERATURE, dim=-1)
        lp = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1)
        return lp, ent

    def fused_path():
        out = model(input_ids, position_ids, None, labels=labels, output_processor=fused_logprob,
                    output_processor_context={"temperature": TEMPERATURE})
        return out.log_probs, out.entropy

    paths = {"logits": logits_path, "fused": fused_path}

    def step(fn):
        lp, ent = fn()
        loss = -(lp * adv).mean() - 0.01 * ent.mean()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.detach()

    def forward(fn):
        with torch.no_grad():
            return fn()

    results = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                        "megatron_core": __import__("megatron.core", fromlist=["x"]).__version__,
                        "batch": b, "seq": s, "layers": args.layers, "vocab": args.vocab,
                        "temperature": TEMPERATURE, "date": time.strftime("%Y-%m-%d %H:%M")}}
    lps = {}
    for name, fn in paths.items():  # warm-up, outputs, peak memory (one path at a time)
        for kind, run in (("forward", forward), ("step", step)):
            run(fn)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            res = run(fn)
            torch.cuda.synchronize()
            results[f"{name}_{kind}_peak_gib"] = torch.cuda.max_memory_allocated() / GiB
            if kind == "forward":
                lps[name] = (res[0].float(), res[1].float())
            del res
    times = {f"{n}_{k}": [] for n in paths for k in ("forward", "step")}
    for _ in range(args.repeats):  # interleaved: drift falls on both paths alike
        for name, fn in paths.items():
            for kind, run in (("forward", forward), ("step", step)):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                run(fn)
                end.record()
                torch.cuda.synchronize()
                times[f"{name}_{kind}"].append(start.elapsed_time(end))
    for key, ts in times.items():
        results[f"{key}_ms"] = statistics.median(ts)
    results["max_logprob_diff"] = (lps["fused"][0] - lps["logits"][0]).abs().max().item()
    results["max_entropy_diff"] = (lps["fused"][1] - lps["logits"][1]).abs().max().item()
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))

    lines = ["| path | forward (no grad) ms | forward peak GiB | step ms | step peak GiB |",
             "|---|---|---|---|---|"]
    for name in paths:
        lines.append(f"| {name} | {results[f'{name}_forward_ms']:.1f} | "
                     f"{results[f'{name}_forward_peak_gib']:.2f} | {results[f'{name}_step_ms']:.1f} | "
                     f"{results[f'{name}_step_peak_gib']:.2f} |")
    lines.append(f"\nmax |log-prob difference| {results['max_logprob_diff']:.2e}, "
                 f"max |entropy difference| {results['max_entropy_diff']:.2e}")
    print(json.dumps(results["meta"]))
    print("\n".join(lines))
    (out_dir / "table.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
