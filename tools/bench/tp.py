"""Where the fused op's TP = 2 time goes: TP = 1 against TP = 2 (vocab split over two GPUs).

(16384, 3584, 152064) bf16, NCCL, forward and forward+backward: single synchronized calls
after a barrier (median over rounds), peak extra memory, a torch.profiler table of rank 0
per phase, and the largest log-prob / entropy difference from TP = 1.

    python -m tools.bench tp --out out/tp_profile       # needs 2 GPUs
    PYTHONPATH=<dir with megatron_overlay_base> python -m tools.bench tp \
        --package megatron_overlay_base --out out/tp_base   # an older copy, same harness
    python -m tools.bench tp --worlds 1 --shape 2048,1024,32768 --out DIR   # one GPU
"""

from __future__ import annotations

import importlib
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from megatron_overlay import model_builder

from .inputs import TEMPERATURE, shape
from .methods import peak_extra_gib
from .report import Run
from .timing import burst

SHAPE = "16384,3584,152064"


def add_arguments(p):
    p.add_argument("--shape", default=SHAPE, help="N,H,V")
    p.add_argument("--worlds", default="1,2", help="TP sizes, one GPU per rank")
    p.add_argument("--rounds", "--repeats", type=int, default=9)
    p.add_argument("--package", default="megatron_overlay",
                   help="the package whose op is timed (e.g. a baseline copy)")
    p.add_argument("--no-profile", action="store_true")


def worker(rank: int, world: int, port: int, n: int, h: int, v: int, rounds: int, package: str,
           profile: bool, out: str) -> None:
    op = importlib.import_module(f"{package}.ops").linear_logprob_entropy
    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world)
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
            lp, ent = op(hid, wt, labels, temperature=TEMPERATURE, tp_group=group)
            if backward:
                (lp.sum() + ent.sum()).backward()
        return lp.detach(), ent.detach()

    row = {"world": world, "N": n, "H": h, "V": v, "package": package}
    for backward in (False, True):
        key = "fb" if backward else "fwd"
        for _ in range(3):
            step(backward)
        times = []
        for _ in range(rounds):
            dist.barrier()
            torch.cuda.synchronize()
            times.append(burst(step, [(backward,)], 1))
        row[f"{key}_ms"] = statistics.median(times)
        row[f"{key}_ms_all"] = [round(t, 3) for t in times]
        row[f"{key}_peak_extra_mib"] = 1024 * peak_extra_gib(lambda _: step(backward), (hidden,))
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
        lp, ent = step(False)
        torch.save({"row": row, "log_probs": lp.cpu(), "entropy": ent.cpu()},
                   os.path.join(out, f"op-tp{world}.pt"))
    dist.destroy_process_group()


def main(args, argv) -> int:
    worlds = [int(w) for w in args.worlds.split(",")]
    if torch.cuda.device_count() < max(worlds):
        args.parser.error(f"--worlds {args.worlds} needs {max(worlds)} GPUs, "
                          f"found {torch.cuda.device_count()}")
    run = Run(args, argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    got = {}
    for world in worlds:
        mp.spawn(worker, nprocs=world, join=True,
                 args=(world, model_builder.free_port(), *shape(args.shape), args.rounds,
                       args.package, not args.no_profile, str(run.out)))
        got[world] = torch.load(run.out / f"op-tp{world}.pt", weights_only=False)
        with open(run.out / "tp_profile.json", "a") as f:
            f.write(json.dumps(got[world]["row"]) + "\n")
    for world, res in got.items():
        row = res["row"]
        run.log(f"TP={world} fwd {row['fwd_ms']:.2f} ms, fb {row['fb_ms']:.2f} ms")
        if world != worlds[0]:
            one = got[worlds[0]]
            run.log(f"  speed-up over TP={worlds[0]}: fwd {one['row']['fwd_ms'] / row['fwd_ms']:.2f}x,"
                    f" fb {one['row']['fb_ms'] / row['fb_ms']:.2f}x; max |diff| log-probs "
                    f"{(res['log_probs'] - one['log_probs']).abs().max().item():.2e}, entropy "
                    f"{(res['entropy'] - one['entropy']).abs().max().item():.2e}")
    return 0
