#!/usr/bin/env python3
"""Where the fused op's TP = 2 time goes: (16384, 3584, 152064) bf16, TP = 1 on one GPU
against TP = 2 (vocab split over two GPUs, NCCL), forward and forward+backward.

Per world size: median of CUDA-event times over repeats, and a torch.profiler table of
rank 0 (CUDA time per kernel/op over 3 steps) for each phase.

    python tools/tp_profile.py --out out/tp_profile     # needs 2 GPUs
    PYTHONPATH=<dir with megatron_overlay_base>:. python tools/tp_profile.py \
        --package megatron_overlay_base --out out/tp_base   # an older copy, same harness

Keep NVLink multicast off (NCCL_NVLS_ENABLE=0), as the device notes ask.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEMPERATURE = 0.7
SHAPE = (16384, 3584, 152064)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker(rank: int, world: int, port: int, out: str, repeats: int, package: str,
           profile: bool) -> None:
    import importlib

    linear_logprob_entropy = importlib.import_module(f"{package}.ops").linear_logprob_entropy

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    n, h, v = SHAPE
    gen = torch.Generator(device="cuda").manual_seed(0)
    hidden = torch.randn(n, h, device="cuda", generator=gen, dtype=torch.bfloat16)
    weight = (torch.randn(v, h, device="cuda", generator=gen) * 1.4 / h ** 0.5).to(torch.bfloat16)
    labels = torch.randint(0, v, (n,), device="cuda", generator=gen)
    local = weight.chunk(world)[rank].contiguous()
    del weight
    group = dist.group.WORLD if world > 1 else None

    def step(backward: bool):
        hid = hidden.detach().requires_grad_(backward)
        wt = local.detach().requires_grad_(backward)
        with torch.set_grad_enabled(backward):
            lp, ent = linear_logprob_entropy(hid, wt, labels, temperature=TEMPERATURE,
                                             tp_group=group)
            if backward:
                (lp.sum() + ent.sum()).backward()

    row = {"world": world, "N": n, "H": h, "V": v, "package": package}
    for backward in (False, True):
        key = "fb" if backward else "fwd"
        for _ in range(3):
            step(backward)
        times = []
        for _ in range(repeats):
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(backward)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        row[f"{key}_ms"] = statistics.median(times)
        row[f"{key}_ms_all"] = [round(t, 3) for t in times]
        if not profile:
            continue
        torch.cuda.synchronize()
        dist.barrier()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(backward)
            torch.cuda.synchronize()
        if rank == 0:
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=18,
                                              max_name_column_width=60)
            with open(os.path.join(out, f"tp{world}_profile.txt"), "a") as f:
                f.write(f"== TP={world} {key} (3 steps, rank 0)\n{table}\n")
    if rank == 0:
        with open(os.path.join(out, "tp_profile.json"), "a") as f:
            f.write(json.dumps(row) + "\n")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/tp_profile"))
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--package", default="megatron_overlay",
                        help="the package whose op is timed (e.g. a baseline copy)")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if torch.cuda.device_count() < 2:
        raise SystemExit("needs 2 GPUs")
    for world in (1, 2):
        mp.spawn(worker, args=(world, _free_port(), str(args.out), args.repeats, args.package,
                               not args.no_profile), nprocs=world, join=True)
    rows = [json.loads(x) for x in (args.out / "tp_profile.json").read_text().splitlines()]
    one, two = rows[-2:]
    print(f"TP=1 fwd {one['fwd_ms']:.2f} ms, fb {one['fb_ms']:.2f} ms; TP=2 fwd "
          f"{two['fwd_ms']:.2f} ms, fb {two['fb_ms']:.2f} ms; speed-up fwd "
          f"{one['fwd_ms'] / two['fwd_ms']:.2f}x, fb {one['fb_ms'] / two['fb_ms']:.2f}x")


if __name__ == "__main__":
    main()
