#!/usr/bin/env python3
"""The build_schedule_plan path (combined 1F1B / EP A2A overlap) with an output processor,
against the plain forward, on 2 GPUs.

A small MoE GPTModel (2 layers, all MoE: 4 experts, top-2, alltoall dispatcher, EP = 2,
local spec, bf16) on the installed core. Two models with the same weights, one with
``overlap_moe_expert_parallel_comm=True``; both run forward+backward over 3 micro-batches
through megatron's own ``get_forward_backward_func()`` (no pipelining): the plain model
through ``model(...)``, the overlap model through ``model.build_schedule_plan(...)``, which
is what ``combined_1f1b_schedule_for_no_pipelining`` asks the forward step for. For each
output processor (none = the default per-token loss, ``"fused_ce_loss"``,
``"fused_logprob"``, by name) the per-token outputs and every gradient are compared;
whatever stops a path is recorded with its error.

    python -m tools.schedule_plan_check --out DIR       # needs 2 CUDA GPUs (NCCL)
    python -m tools.schedule_plan_check --define-missing-te-names --out DIR   # 0.14-0.15

Without Transformer Engine, megatron-core 0.15.x cannot run any MoE forward: its router
calls ``router_gating_linear``, which tests ``te_general_gemm is not None``, a name
``moe_utils`` defines only when TE imports (NameError). Later releases (0.19.2) set these
names to None without TE; ``--define-missing-te-names`` does the same here, so that the
schedule-plan path itself can be checked on those cores.

Writes DIR/schedule_plan.json. Keep NVLink multicast off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from megatron_overlay import model_builder
from tools.bench.inputs import TEMPERATURE

MICROBATCHES = 3
PROCESSORS = [None, "fused_ce_loss", "fused_logprob"]
CFG = model_builder.ModelConfig(vocab=4096, hidden=256, layers=2, heads=4, seq=256, batch=2,
                            dtype=torch.bfloat16, tied=False)
MOE = dict(num_moe_experts=4, moe_router_topk=2, moe_token_dispatcher_type="alltoall",
           expert_model_parallel_size=2, add_bias_linear=False, moe_aux_loss_coeff=0.0,
           moe_router_load_balancing_type="none")


TE_NAMES = ["fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss", "fused_permute",
            "fused_permute_with_probs", "fused_sort_chunks_by_index",
            "fused_sort_chunks_by_index_with_probs", "fused_topk_with_score_function",
            "fused_unpermute", "te_general_gemm"]


def define_missing_te_names() -> list[str]:
    """Set moe_utils' TE-only names to None where the core left them undefined, as 0.19.2
    does without TE."""
    from megatron.core.transformer.moe import moe_utils

    missing = [name for name in TE_NAMES if not hasattr(moe_utils, name)]
    for name in missing:
        setattr(moe_utils, name, None)
    return missing


def build(overlap: bool):
    spec = model_builder.layer_spec(num_experts=MOE["num_moe_experts"], moe_grouped_gemm=False)
    return model_builder.build_model(CFG, device="cuda", spec=spec,
                                 overlap_moe_expert_parallel_comm=overlap, **MOE)


def outputs_of(processor, out) -> dict[str, torch.Tensor]:
    if processor == "fused_logprob":
        return {"log_probs": out.log_probs, "entropy": out.entropy}
    return {"per_token": out}  # the default per-token loss, or fused_ce_loss's


def run_path(model, processor, plan: bool, microbatches) -> dict:
    from megatron.core.pipeline_parallel import get_forward_backward_func

    seen = []

    def forward_step(data_iterator, model, return_schedule_plan=False):
        (input_ids, position_ids, mask, labels, loss_mask), coeff = next(data_iterator)
        kwargs = dict(labels=labels, loss_mask=loss_mask)
        if processor is not None:
            kwargs.update(output_processor=processor,
                          output_processor_context={"temperature": TEMPERATURE})
        if return_schedule_plan:
            out = model.build_schedule_plan(input_ids, position_ids, mask, **kwargs)
        else:
            out = model(input_ids, position_ids, mask, **kwargs)

        def loss_func(out):
            tensors = outputs_of(processor, out)
            # clone: the combined schedule frees the loss node's inputs after backward
            seen.append({k: v.detach().float().cpu().clone() for k, v in tensors.items()})
            loss = sum((v.float() * coeff).sum() for v in tensors.values())
            return loss, {"loss": loss.detach()}

        return out, loss_func

    assert model.config.overlap_moe_expert_parallel_comm == plan
    model.zero_grad(set_to_none=True)
    forward_backward = get_forward_backward_func()
    forward_backward(forward_step_func=forward_step, data_iterator=iter(microbatches),
                     model=[model], num_microbatches=MICROBATCHES, seq_length=CFG.seq,
                     micro_batch_size=CFG.batch, forward_only=False)
    torch.cuda.synchronize()
    return {"outputs": seen, "grads": {k: g.float().cpu() for k, g in
                                       model_builder.grads(model).items()}}


def compare(plain: dict, plan: dict) -> dict:
    out_diff = max((a[k] - b[k]).abs().max().item()
                   for a, b in zip(plain["outputs"], plan["outputs"]) for k in a)
    assert plain["grads"].keys() == plan["grads"].keys()
    grad_rel = max(((plan["grads"][k] - g).abs().max() / g.abs().max().clamp(min=1e-30)).item()
                   for k, g in plain["grads"].items())
    return {"microbatches": len(plan["outputs"]), "output_max_abs": out_diff,
            "grad_max_rel": grad_rel, "n_grads": len(plain["grads"])}


def worker(rank: int, port: int, out: str, te_names: bool) -> None:
    defined = define_missing_te_names() if te_names else []
    model_builder.init_distributed(rank, 2, port, 1, device="cuda", ep=2)
    plain_model, plan_model = build(False), build(True)
    plan_model.load_state_dict(plain_model.state_dict())
    microbatches = []
    for m in range(MICROBATCHES):
        inputs = model_builder.batch(CFG, seed=100 + m, device="cuda")
        gen = torch.Generator().manual_seed(200 + m)
        microbatches.append((inputs, torch.randn(CFG.batch, CFG.seq, generator=gen).cuda()))
    report = {}
    for processor in PROCESSORS:
        row = {}
        results = {}
        for name, model, plan in (("plain", plain_model, False), ("plan", plan_model, True)):
            try:
                results[name] = run_path(model, processor, plan, microbatches)
                row[name] = "ran"
            except Exception as exc:  # noqa: BLE001  (what stops a path is the result)
                row[name] = f"{type(exc).__name__}: {exc}"
                row[f"{name}_traceback"] = traceback.format_exc(limit=-6)
        if len(results) == 2:
            row.update(compare(results["plain"], results["plan"]))
        report[processor or "default loss"] = row
    if rank == 0:
        from importlib.metadata import version

        Path(out, "schedule_plan.json").write_text(json.dumps(
            {"megatron_core": version("megatron-core"), "torch": torch.__version__,
             "gpu": torch.cuda.get_device_name(0), "te_names_defined_as_none": defined,
             "processors": report}, indent=1) + "\n")
    dist.barrier()
    model_builder.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/schedule_plan"))
    parser.add_argument("--define-missing-te-names", action="store_true",
                        help="set moe_utils' TE-only names to None where the core leaves them "
                             "undefined without Transformer Engine (0.14-0.15), as 0.19 does")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if torch.cuda.device_count() < 2:
        raise SystemExit(f"needs 2 CUDA GPUs, found {torch.cuda.device_count()}")
    mp.spawn(worker, args=(model_builder.free_port(), str(args.out), args.define_missing_te_names),
             nprocs=2, join=True)
    report = json.loads((args.out / "schedule_plan.json").read_text())
    for name, row in report["processors"].items():
        print(f"{report['megatron_core']:>18}  {name:14}  plain: {row['plain'][:60]}  "
              f"plan: {row['plan'][:60]}  out {row.get('output_max_abs')}  "
              f"grad rel {row.get('grad_max_rel')}")


if __name__ == "__main__":
    main()
