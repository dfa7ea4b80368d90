#!/usr/bin/env python3
"""``fused_logprob`` on megatron's hybrid model against its logits path, on one device.

A hybrid model (MambaModel / HybridModel; attention and MLP layers, see megatron_overlay/model_builder.py)
on the installed, patched core; forward with ``output_processor="fused_logprob"`` by name
(temperature 0.7) and with a reference processor that materializes the logits through the
output layer (``model_builder.logits_path_logprob``), each followed by backward of the same
random combination of log-probs and entropy: max abs differences of log-probs, entropy and
every parameter gradient (relative to its largest entry), and on CUDA the median time and
peak extra memory of each path's forward+backward. In bf16 both are also compared with an
fp32 head (hidden states and weight upcast): the logits path rounds its logits to bf16,
the fused path keeps them in fp32.

    python -m tools.hybrid_check --device cpu --out DIR    # fp32, the tiny test model
    python -m tools.hybrid_check --device cuda --out DIR   # bf16, V 151936, 8192 tokens
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from megatron_overlay import model_builder
from tools.bench import timing
from tools.bench.inputs import TEMPERATURE
from tools.bench.methods import peak_extra_gib



def model_config(device: str, tied: bool) -> model_builder.ModelConfig:
    if device == "cpu":
        return model_builder.ModelConfig(model="hybrid", tied=tied)
    return model_builder.ModelConfig(model="hybrid", tied=tied, vocab=151936, hidden=2048,
                                 layers=2, heads=16, seq=2048, batch=4, dtype=torch.bfloat16)


def fp32_head_logprob(*, hidden_states, output_layer, output_weight, labels, context, **_):
    """The fp32-head reference (TP 1): hidden states and weight upcast, fp32 logits."""
    weight = output_layer.weight if output_weight is None else output_weight
    logits = torch.nn.functional.linear(hidden_states.float(), weight.float())
    logp = torch.log_softmax(logits / context["temperature"], dim=-1)  # [s, b, v]
    picked = logp.gather(-1, labels.transpose(0, 1).unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return {"log_probs": picked.transpose(0, 1), "entropy": entropy.transpose(0, 1)}


def run(model, cfg, processor, coeffs, device):
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg, device=device)
    out = model(input_ids, position_ids, mask, labels=labels, output_processor=processor,
                output_processor_context={"temperature": TEMPERATURE})
    ((out["log_probs"] * coeffs[0]).sum() + (out["entropy"] * coeffs[1]).sum()).backward()
    grads = {k: g.float() for k, g in model_builder.grads(model).items()}
    model.zero_grad(set_to_none=True)
    return out["log_probs"].detach().float(), out["entropy"].detach().float(), grads


def differences(got, ref) -> dict:
    """Max and mean abs differences of log-probs and entropy; max gradient difference
    relative to the gradient's largest entry."""
    return {"log_probs_max_abs": (got[0] - ref[0]).abs().max().item(),
            "log_probs_mean_abs": (got[0] - ref[0]).abs().mean().item(),
            "entropy_max_abs": (got[1] - ref[1]).abs().max().item(),
            "grad_max_rel": max(((got[2][k] - g).abs().max() / g.abs().max().clamp(
                min=1e-30)).item() for k, g in ref[2].items())}


def timed(model, cfg, processor, coeffs, device, repeats=5) -> dict:
    """Single synchronized forward+backward calls (the first, where Triton compiles, not
    timed) and their peak extra memory."""
    def call():
        run(model, cfg, processor, coeffs, device)

    got = timing.interleaved({"call": call}, [()], repeats, single=True, heat_s=0,
                             warmup_calls=1)["call"]
    return {"fwd_bwd_ms": got.median_ms, "peak_extra_mib": 1024 * peak_extra_gib(
        lambda _: call(), (coeffs[0],))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, default=Path("out/hybrid_check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model_builder.init_distributed(0, 1, model_builder.free_port(), 1, device=args.device)
    from importlib.metadata import version

    report = {"device": args.device, "megatron_core": version("megatron-core"),
              "torch": torch.__version__, "configs": {}}
    if args.device == "cuda":
        report["gpu"] = torch.cuda.get_device_name(0)
    for tied in (True, False):
        cfg = model_config(args.device, tied)
        model = model_builder.build_model(cfg, device=args.device)
        gen = torch.Generator().manual_seed(7)
        coeffs = [torch.randn(cfg.batch, cfg.seq, generator=gen).to(args.device)
                  for _ in range(2)]
        fused = run(model, cfg, "fused_logprob", coeffs, args.device)
        ref = run(model, cfg, model_builder.logits_path_logprob, coeffs, args.device)
        row = {"class": type(model).__name__, "tokens": cfg.batch * cfg.seq,
               "vocab": cfg.vocab, "hidden": cfg.hidden, "dtype": str(cfg.dtype),
               **differences(fused, ref), "n_grads": len(ref[2])}
        if cfg.dtype != torch.float32:  # the logits path's own rounding, told apart
            fp32 = run(model, cfg, fp32_head_logprob, coeffs, args.device)
            row["vs_fp32_head"] = {"fused": differences(fused, fp32),
                                   "logits_path": differences(ref, fp32)}
        if args.device == "cuda":
            row["fused"] = timed(model, cfg, "fused_logprob", coeffs, args.device)
            row["logits_path"] = timed(model, cfg, model_builder.logits_path_logprob, coeffs,
                                       args.device)
        report["configs"]["tied" if tied else "untied"] = row
        del model
    model_builder.shutdown()
    print(json.dumps(report, indent=1))
    (args.out / "hybrid_check.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
