"""Run the tiny GPTModel and hybrid model under one TP size and save what the hook tests compare.

    python hook_worker.py --tp 2 --mode redo --out DIR

Spawns ``tp`` gloo ranks; for each of ``gpt_cpu.configs(tp)`` (GPTModel and the hybrid model;
SP, tying, MTP, MuP, MoE) it runs
forward with labels (per-token loss) + backward, and forward without labels (local logits
shard), and writes ``DIR/rank{r}.pt``. ``--mode`` picks the processor: ``none`` (the
default path), ``redo`` (a 0.18-style processor redoing the default postprocess) or
``redo-by-name`` (the same processor, registered and passed by name). Which megatron is
imported is decided by PYTHONPATH, so one test can run an upstream and a patched tree.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support import gpt_cpu  # noqa: E402
from megatron_overlay import model_builder  # noqa: E402
from tests.support.processors_018 import recording_processor  # noqa: E402


def run_config(cfg: model_builder.ModelConfig, mode: str, results: dict) -> None:
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, loss_mask = model_builder.batch(cfg)
    context = {"calls": [], "marker": object()}
    hook = {}
    if mode == "redo":
        hook = dict(output_processor=recording_processor, output_processor_context=context)
    elif mode == "redo-by-name":
        hook = dict(output_processor="tests.redo_default", output_processor_context=context)

    # upstream's MambaModel before 0.17 takes no loss_mask (the patch adds it for processors)
    takes_loss_mask = "loss_mask" in inspect.signature(model.forward).parameters
    loss = model(input_ids, position_ids, mask, labels=labels,
                 **({"loss_mask": loss_mask} if takes_loss_mask else {}), **hook)
    (loss * loss_mask).sum().backward()
    model_builder.finalize_grads(model)
    results[f"{cfg.name}/loss"] = loss.detach().clone()
    for name, grad in model_builder.grads(model).items():
        results[f"{cfg.name}/grad/{name}"] = grad
    model.zero_grad(set_to_none=True)
    calls = 1
    if not cfg.mtp_layers:  # pre-0.17 MTP asserts that labels are given
        with torch.no_grad():
            logits = model(input_ids, position_ids, mask, **hook)
        results[f"{cfg.name}/logits"] = logits.detach().clone()
        calls = 2

    if mode != "none":
        assert len(context["calls"]) == calls, f"processor called {len(context['calls'])} times"
        first = context["calls"][0]
        results[f"{cfg.name}/kwarg_names"] = first["names"]
        assert first["context_is_callers"], "context is not the caller's object"
        assert first["loss_mask_is_callers"](loss_mask), "loss_mask is not the caller's"
        assert first["labels"] is labels
        assert (first["output_weight_is_none"]) == (not cfg.tied), "output_weight vs tying"


def worker(rank: int, world: int, port: int, mode: str, out: str) -> None:
    model_builder.init_distributed(rank, world, port, world)
    if mode == "redo-by-name":
        from megatron_overlay.processors import register
        from tests.support.processors_018 import recording_processor as proc

        register("tests.redo_default")(proc)
    results: dict = {}
    for cfg in gpt_cpu.configs(world):
        run_config(cfg, mode, results)
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    model_builder.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--mode", choices=["none", "redo", "redo-by-name"], default="none")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    port = model_builder.free_port()
    mp.spawn(worker, args=(args.tp, port, args.mode, args.out), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
