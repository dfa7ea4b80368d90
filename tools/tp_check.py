#!/usr/bin/env python3
"""fused_logprob under tensor + sequence parallelism: TP=2 vs TP=1 on the same weights.

A small GPTModel (local spec) on the installed core, ``output_processor="fused_logprob"``
at temperature 0.7, SP off/on x tied/untied: log-probs, entropy and every parameter's
gradient at TP=2 (shards gathered) against TP=1, as max abs differences. With
``--device cuda`` on a machine with >= 2 GPUs it also times the fused op's TP path at
(16384, 3584, 152064) split over 2 ranks against its TP=1 run on one GPU.

    python tools/tp_check.py --device cpu                 # gloo, fp32, tiny model
    python tools/tp_check.py --device cuda --out DIR      # NCCL, bf16, one process per GPU
    python tools/tp_check.py --device cuda --no-op-timing # the model comparison only

On CUDA keep NVLink multicast off (NCCL_NVLS_ENABLE=0), as the device notes ask.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from megatron_overlay import model_builder  # noqa: E402

TEMPERATURE = 0.7


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


def time_op(rank: int, world: int, port: int, out: str, shape=(16384, 3584, 152064)) -> None:
    """The fused op alone: TP=world (vocab split over ranks) on one GPU per rank."""
    from megatron_overlay.ops import linear_logprob_entropy

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    n, h, v = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    hidden = torch.randn(n, h, device="cuda", generator=gen, dtype=torch.bfloat16)
    weight = (torch.randn(v, h, device="cuda", generator=gen) / h ** 0.5).to(torch.bfloat16)
    labels = torch.randint(0, v, (n,), device="cuda", generator=gen)
    local = weight.chunk(world)[rank].contiguous()
    group = dist.group.WORLD if world > 1 else None
    del weight

    def step(backward: bool):
        hid = hidden.detach().requires_grad_(backward)
        wt = local.detach().requires_grad_(backward)
        with torch.set_grad_enabled(backward):
            lp, ent = linear_logprob_entropy(hid, wt, labels, temperature=TEMPERATURE,
                                             tp_group=group)
            if backward:
                (lp.sum() + ent.sum()).backward()
        return lp, ent

    row = {"world": world, "n": n, "h": h, "v": v}
    for backward in (False, True):
        step(backward)
        times = []
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(backward)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        key = "fwd_bwd" if backward else "fwd"
        row[f"{key}_ms"] = statistics.median(times)
        row[f"{key}_peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    lp, ent = step(False)
    if rank == 0:
        torch.save({"row": row, "log_probs": lp.cpu(), "entropy": ent.cpu()},
                   os.path.join(out, f"op-tp{world}.pt"))
    dist.destroy_process_group()


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
    parser.add_argument("--no-op-timing", action="store_true",
                        help="--device cuda: skip the fused op's timing (it does not depend "
                             "on the core, so one run per machine is enough)")
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
    if args.device == "cuda" and not args.no_op_timing:
        for world in (1, 2):
            mp.spawn(time_op, args=(world, model_builder.free_port(), str(args.out)), nprocs=world,
                     join=True)
        op1, op2 = (torch.load(args.out / f"op-tp{w}.pt", weights_only=False) for w in (1, 2))
        report["op"] = {"tp1": op1["row"], "tp2": op2["row"],
                        "log_probs_max_abs": (op1["log_probs"] - op2["log_probs"]).abs().max().item(),
                        "entropy_max_abs": (op1["entropy"] - op2["entropy"]).abs().max().item()}
    print(json.dumps(report, indent=1))
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
