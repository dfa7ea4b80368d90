#!/usr/bin/env python3
"""fused_logprob under tensor + sequence parallelism: TP=2 vs TP=1 on the same weights.

A small GPTModel (local spec) on the installed core, ``output_processor="fused_logprob"``
at temperature 0.7, SP off/on x tied/untied: log-probs, entropy and every parameter's
gradient at TP=2 (shards gathered) against TP=1, as max abs differences. The fused op's
own TP = 2 timing: ``python -m tools.bench tp``.

    python -m tools.tp_check --device cpu                 # gloo, fp32, tiny model
    python -m tools.tp_check --device cuda --out DIR      # NCCL, bf16, one process per GPU

On CUDA keep NVLink multicast off (NCCL_NVLS_ENABLE=0), as the device notes ask.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.multiprocessing as mp

from megatron_overlay import model_builder
from tools.bench.inputs import TEMPERATURE



def model_config(tp: int, sp: bool, tied: bool, device: str) -> model_builder.ModelConfig:
    if device == "cpu":
        return model_builder.ModelConfig(tp=tp, sp=sp, tied=tied)
    return model_builder.ModelConfig(tp=tp, sp=sp, tied=tied, vocab=32000, hidden=1024, layers=2,
                               heads=8, seq=1024, batch=4, dtype=torch.bfloat16)


def run_model(rank: int, world: int, port: int, device: str, out: str) -> None:
    model_builder.init_distributed(rank, world, port, world, device=device)
    results = {}
    for sp in ([False, True] if world > 1 else [False]):
        for tied in (True, False):
            cfg = model_config(world, sp, tied, device)
            model = model_builder.build_model(cfg, device=device)
            input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg, device=device)
            gen = torch.Generator().manual_seed(7)
            c1 = torch.randn(cfg.batch, cfg.seq, generator=gen).to(device)
            c2 = torch.randn(cfg.batch, cfg.seq, generator=gen).to(device)
            res = model(input_ids, position_ids, mask, labels=labels,
                        output_processor="fused_logprob",
                        output_processor_context={"temperature": TEMPERATURE})
            ((res.log_probs * c1).sum() + (res.entropy * c2).sum()).backward()
            model_builder.finalize_grads(model)
            results[f"sp{int(sp)}-{'tied' if tied else 'untied'}"] = {
                "log_probs": res.log_probs.detach().cpu(), "entropy": res.entropy.detach().cpu(),
                "grads": model_builder.gathered_grads(model)}
    if rank == 0:
        torch.save(results, os.path.join(out, f"model-tp{world}.pt"))
    model_builder.shutdown()


def compare(out: Path) -> dict:
    one, two = (torch.load(out / f"model-tp{t}.pt", weights_only=False) for t in (1, 2))
    report = {}
    for name, res in two.items():
        ref = one[name.replace("sp1", "sp0")]
        report[name] = {
            "log_probs_max_abs": (res["log_probs"] - ref["log_probs"]).abs().max().item(),
            "entropy_max_abs": (res["entropy"] - ref["entropy"]).abs().max().item(),
            "grad_max_abs": max((res["grads"][k] - g).abs().max().item()
                                for k, g in ref["grads"].items()),
            "grad_max_rel": max(((res["grads"][k] - g).abs().max() / g.abs().max().clamp(
                min=1e-30)).item() for k, g in ref["grads"].items()),
            "n_grads": len(ref["grads"]),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, default=Path("out/tp_check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    if args.device == "cuda" and gpus < 2:
        raise SystemExit(f"--device cuda needs 2 GPUs, found {gpus}")
    for world in (1, 2):
        mp.spawn(run_model, args=(world, model_builder.free_port(), args.device, str(args.out)),
                 nprocs=world, join=True)
    from importlib.metadata import version

    report = {"device": args.device, "megatron_core": version("megatron-core"),
              "torch": torch.__version__, "model": compare(args.out)}
    if args.device == "cuda":
        report["gpu"] = torch.cuda.get_device_name(0)
    print(json.dumps(report, indent=1))
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
