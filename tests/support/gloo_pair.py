"""Run a test body on two CPU ranks of a gloo process group (spawned processes).

    run_on_two_ranks(body)    # body(rank) at module level (spawn pickles it by name)

A rank's exception is reported by the parent's assertion, with its type and message.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def _rank(rank: int, body, port: int, result) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        body(rank)
        result[rank] = "ok"
    except Exception as e:  # reported by the parent
        result[rank] = f"{type(e).__name__}: {e}"
    finally:
        dist.destroy_process_group()


def run_on_two_ranks(body) -> None:
    import torch.multiprocessing as mp

    from megatron_overlay.model_builder import free_port

    result = mp.Manager().dict()
    mp.spawn(_rank, args=(body, free_port(), result), nprocs=2)
    assert dict(result) == {0: "ok", 1: "ok"}
