"""Two ranks (NCCL, one GPU each; gloo on CPU for a dry run) running megatron's GPTModel
with ``output_processor="fused_logprob"`` by name, saving what tests/core/test_multi_gpu.py
compares.

    python multi_gpu_worker.py --mode tp_sp --out DIR [--device cuda]
    python multi_gpu_worker.py --mode pp --out DIR
    python multi_gpu_worker.py --mode cp --out DIR
    python multi_gpu_worker.py --mode tp_vs_tp1 --out DIR [--device cpu]
    python multi_gpu_worker.py --mode schedule_plan --out DIR

tp_sp  TP = 2, SP off/on x tied/untied x fp32/bf16: fused_logprob against the
       gathered-logits path (``runtime_gather_output=True``, then fp32
       ``log_softmax(logits / T)``) on the same rank and weights; the same random
       combination of log-probs and entropy is backpropagated through both.
pp     PP = 2 through megatron's own ``get_forward_backward_func()`` (1F1B, 4 micro-batches),
       fused_logprob on the last stage, tied and untied, against PP = 1 on the same weights
       (each stage's parameters copied from the full model), micro-batch losses scaled by
       1 / num_microbatches as the schedule does. Tied embedding grads are summed over the
       embedding group, as finalize_model_grads does.
cp     CP = 2: builds the local spec with context_parallel_size = 2 and records what stops
       it (the local spec's DotProductAttention supports neither CP nor packed sequences).
tp_vs_tp1  fused_logprob at TP = 2 (SP off/on x tied/untied, shards gathered) against
       TP = 1 (DP = 2) on the same weights; CPU: fp32, the builder's tiny model; CUDA: bf16,
       vocab 32000, hidden 1024, 4 x 1024 tokens. Saves max differences, not tensors.
schedule_plan  an MoE GPTModel (all MoE: 4 experts, top-2, alltoall, EP = 2, bf16), 3
       micro-batches through ``get_forward_backward_func()``: ``model(...)`` against
       ``model.build_schedule_plan(...)`` (``overlap_moe_expert_parallel_comm=True``, the
       combined-1F1B schedule), per processor; what stops a path is recorded. moe_utils'
       TE-only names are set to None where the core leaves them undefined without TE
       (0.14-0.15: the router's ``te_general_gemm`` NameError), as 0.19.2 does.

Saves DIR/<mode>-rank{r}.pt; ``launch`` runs it and returns them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from megatron_overlay import model_builder  # noqa: E402

TEMPERATURE = 0.7
MICROBATCHES = 4


def gpu_config(**kw) -> model_builder.ModelConfig:
    base = dict(vocab=4096, hidden=256, layers=2, heads=4, seq=256, batch=2)
    base.update(kw)
    return model_builder.ModelConfig(**base)


def coefficients(cfg, device, seed=7):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(cfg.batch, cfg.seq, generator=gen).to(device),
            torch.randn(cfg.batch, cfg.seq, generator=gen).to(device))


def logits_path(model, cfg, inputs):
    """The default output layer with the vocab shards gathered, then fp32 log-softmax."""
    input_ids, position_ids, mask, labels, _ = inputs
    logits = model(input_ids, position_ids, mask, runtime_gather_output=True)  # [b, s, V]
    logp = torch.log_softmax(logits.float() / TEMPERATURE, dim=-1)
    log_probs = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return log_probs, -(logp.exp() * logp).sum(-1)


def fused_path(model, cfg, inputs):
    input_ids, position_ids, mask, labels, _ = inputs
    out = model(input_ids, position_ids, mask, labels=labels, output_processor="fused_logprob",
                output_processor_context={"temperature": TEMPERATURE})
    return out.log_probs, out.entropy


def run_tp_sp(rank: int, device: str) -> dict:
    results = {}
    dtypes = [torch.float32, torch.bfloat16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        for sp in (False, True):
            for tied in (True, False):
                cfg = gpu_config(tp=2, sp=sp, tied=tied, dtype=dtype)
                if device == "cpu":
                    cfg = model_builder.ModelConfig(tp=2, sp=sp, tied=tied)
                inputs = model_builder.batch(cfg, device=device)
                c1, c2 = coefficients(cfg, device)
                model = model_builder.build_model(cfg, device=device)
                row = {}
                for name, path in (("fused", fused_path), ("logits", logits_path)):
                    log_probs, entropy = path(model, cfg, inputs)
                    ((log_probs * c1).sum() + (entropy * c2).sum()).backward()
                    model_builder.finalize_grads(model)
                    row[name] = {"log_probs": log_probs.detach().float().cpu(),
                                 "entropy": entropy.detach().float().cpu(),
                                 "grads": {k: g.float().cpu()
                                           for k, g in model_builder.grads(model).items()}}
                    model.zero_grad(set_to_none=True)
                results[f"{str(dtype)[6:]}-{cfg.name}"] = row
    return results


def stage_name(name: str, stage: int, layers_per_stage: int, tied: bool, last: bool) -> str:
    """The full (PP = 1) model's parameter name for a stage model's parameter."""
    parts = name.split(".")
    if parts[:2] == ["decoder", "layers"]:
        parts[2] = str(int(parts[2]) + stage * layers_per_stage)
        return ".".join(parts)
    if tied and last and name == "output_layer.weight":
        return "embedding.word_embeddings.weight"
    return name


def run_pp(rank: int, device: str) -> dict:
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    results = {}
    for tied in (True, False):
        full_cfg = gpu_config(tied=tied) if device == "cuda" else model_builder.ModelConfig(tied=tied)
        # PP = 1 reference (both ranks compute it; DP = 2)
        model_builder.init_model_parallel(1, 1)
        full = model_builder.build_model(full_cfg, device=device)
        micro = [model_builder.batch(full_cfg, seed=100 + m, device=device)
                 for m in range(MICROBATCHES)]
        coeffs = [coefficients(full_cfg, device, seed=200 + m) for m in range(MICROBATCHES)]
        ref_lp, ref_ent = [], []
        for inputs, (c1, c2) in zip(micro, coeffs):
            lp, ent = fused_path(full, full_cfg, inputs)
            (((lp * c1).sum() + (ent * c2).sum()) / MICROBATCHES).backward()
            ref_lp.append(lp.detach().cpu())
            ref_ent.append(ent.detach().cpu())
        ref_grads = {k: g.cpu() for k, g in model_builder.grads(full).items()}
        full_state = {k: p.detach().clone() for k, p in full.named_parameters()}
        del full

        # PP = 2: this rank's stage, weights copied from the full model
        cfg = dataclasses.replace(full_cfg, pp=2)
        model_builder.init_model_parallel(1, 2)
        stage = parallel_state.get_pipeline_model_parallel_rank()
        last = parallel_state.is_pipeline_last_stage()
        model = model_builder.build_model(cfg, device=device, batch_p2p_comm=device == "cuda")
        per_stage = cfg.layers // cfg.pp
        names = {}
        with torch.no_grad():
            for name, param in model.named_parameters():
                names[name] = stage_name(name, stage, per_stage, tied, last)
                param.copy_(full_state[names[name]])

        seen_lp, seen_ent = [], []
        data = iter(list(zip(micro, coeffs)))

        def forward_step(data_iterator, model):
            (input_ids, position_ids, mask, labels, _), (c1, c2) = next(data_iterator)
            out = model(input_ids, position_ids, mask, labels=labels,
                        output_processor="fused_logprob",
                        output_processor_context={"temperature": TEMPERATURE})

            def loss_func(out):
                seen_lp.append(out.log_probs.detach().cpu())
                seen_ent.append(out.entropy.detach().cpu())
                loss = (out.log_probs * c1).sum() + (out.entropy * c2).sum()
                return loss, {"loss": loss.detach()}

            return out, loss_func

        forward_backward = get_forward_backward_func()
        forward_backward(forward_step_func=forward_step, data_iterator=data, model=[model],
                         num_microbatches=MICROBATCHES, seq_length=cfg.seq,
                         micro_batch_size=cfg.batch, forward_only=False)
        if tied and parallel_state.is_rank_in_embedding_group():
            weight = (model.embedding.word_embeddings.weight if stage == 0
                      else model.output_layer.weight)
            dist.all_reduce(weight.grad, group=parallel_state.get_embedding_group())
        row = {"schedule": forward_backward.__name__, "stage": stage,
               "grads": {names[k]: g.cpu() for k, g in model_builder.grads(model).items()},
               "ref_grads": {names[k]: ref_grads[names[k]] for k in names}}
        if last:
            row.update(log_probs=torch.stack(seen_lp), entropy=torch.stack(seen_ent),
                       ref_log_probs=torch.stack(ref_lp), ref_entropy=torch.stack(ref_ent))
        results[f"pp2-{'tied' if tied else 'untied'}"] = row
        del model
    return results


def run_cp(rank: int, device: str) -> dict:
    cfg = model_builder.ModelConfig()
    model_builder.init_model_parallel(1, 1, cp=2)
    try:
        model_builder.build_model(cfg, device=device, context_parallel_size=2)
    except Exception as exc:  # noqa: BLE001  (what stops it is the result)
        return {"built": False, "error": f"{type(exc).__name__}: {exc}",
                "where": traceback.format_exc(limit=-2)}
    return {"built": True}


def tp_config(tp: int, sp: bool, tied: bool, device: str) -> model_builder.ModelConfig:
    if device == "cpu":
        return model_builder.ModelConfig(tp=tp, sp=sp, tied=tied)
    return model_builder.ModelConfig(tp=tp, sp=sp, tied=tied, vocab=32000, hidden=1024,
                                     layers=2, heads=8, seq=1024, batch=4, dtype=torch.bfloat16)


def run_tp_vs_tp1(rank: int, device: str) -> dict:
    ref, report = {}, {}
    for tp in (1, 2):
        model_builder.init_model_parallel(tp)
        for sp in ((False, True) if tp == 2 else (False,)):
            for tied in (True, False):
                cfg = tp_config(tp, sp, tied, device)
                model = model_builder.build_model(cfg, device=device)
                c1, c2 = coefficients(cfg, device)
                log_probs, entropy = fused_path(model, cfg, model_builder.batch(cfg, device=device))
                ((log_probs * c1).sum() + (entropy * c2).sum()).backward()
                model_builder.finalize_grads(model)
                # gathered_grads reads every parameter's .grad: one without fails here
                res = {"log_probs": log_probs.detach().float().cpu(),
                       "entropy": entropy.detach().float().cpu(),
                       "grads": model_builder.gathered_grads(model)}
                del model
                if tp == 1:
                    ref[tied] = res
                    continue
                base = ref[tied]
                assert res["grads"].keys() == base["grads"].keys()
                report[cfg.name] = {
                    **{k: (res[k] - base[k]).abs().max().item() for k in ("log_probs", "entropy")},
                    "grad_abs": max((res["grads"][k] - g).abs().max().item()
                                    for k, g in base["grads"].items()),
                    "grad_rel": max(((res["grads"][k] - g).abs().max() / g.abs().max().clamp(
                        min=1e-30)).item() for k, g in base["grads"].items()),
                    "n_grads": len(base["grads"])}
    return report


PLAN_MICROBATCHES = 3
PROCESSORS = [None, "fused_ce_loss", "fused_logprob"]
MOE = dict(num_moe_experts=4, moe_router_topk=2, moe_token_dispatcher_type="alltoall",
           expert_model_parallel_size=2, add_bias_linear=False, moe_aux_loss_coeff=0.0,
           moe_router_load_balancing_type="none")
TE_NAMES = ["fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss", "fused_permute",
            "fused_permute_with_probs", "fused_sort_chunks_by_index",
            "fused_sort_chunks_by_index_with_probs", "fused_topk_with_score_function",
            "fused_unpermute", "te_general_gemm"]


def define_missing_te_names() -> list[str]:
    from megatron.core.transformer.moe import moe_utils

    missing = [name for name in TE_NAMES if not hasattr(moe_utils, name)]
    for name in missing:
        setattr(moe_utils, name, None)
    return missing


def run_plan_path(model, cfg, processor, microbatches) -> dict:
    from megatron.core.pipeline_parallel import get_forward_backward_func

    seen = []

    def forward_step(data_iterator, model, return_schedule_plan=False):
        (input_ids, position_ids, mask, labels, loss_mask), coeff = next(data_iterator)
        kwargs = dict(labels=labels, loss_mask=loss_mask)
        if processor is not None:
            kwargs.update(output_processor=processor,
                          output_processor_context={"temperature": TEMPERATURE})
        forward = model.build_schedule_plan if return_schedule_plan else model
        out = forward(input_ids, position_ids, mask, **kwargs)

        def loss_func(out):
            tensors = ({"log_probs": out.log_probs, "entropy": out.entropy}
                       if processor == "fused_logprob" else {"per_token": out})
            # clone: the combined schedule frees the loss node's inputs after backward
            seen.append({k: v.detach().float().cpu().clone() for k, v in tensors.items()})
            loss = sum((v.float() * coeff).sum() for v in tensors.values())
            return loss, {"loss": loss.detach()}

        return out, loss_func

    model.zero_grad(set_to_none=True)
    get_forward_backward_func()(
        forward_step_func=forward_step, data_iterator=iter(microbatches), model=[model],
        num_microbatches=PLAN_MICROBATCHES, seq_length=cfg.seq, micro_batch_size=cfg.batch,
        forward_only=False)
    torch.cuda.synchronize()
    return {"outputs": seen,
            "grads": {k: g.float().cpu() for k, g in model_builder.grads(model).items()}}


def run_schedule_plan(rank: int, device: str) -> dict:
    from importlib.metadata import version

    defined = define_missing_te_names()
    model_builder.init_model_parallel(1, 1, ep=2)
    cfg = gpu_config(dtype=torch.bfloat16, tied=False)
    spec = model_builder.layer_spec(num_experts=MOE["num_moe_experts"], moe_grouped_gemm=False)
    plain, plan = (model_builder.build_model(cfg, device=device, spec=spec,
                                             overlap_moe_expert_parallel_comm=overlap, **MOE)
                   for overlap in (False, True))
    plan.load_state_dict(plain.state_dict())
    microbatches = [(model_builder.batch(cfg, seed=100 + m, device=device),
                     coefficients(cfg, device, seed=200 + m)[0])
                    for m in range(PLAN_MICROBATCHES)]
    rows = {}
    for processor in PROCESSORS:
        row, results = {}, {}
        for name, model in (("plain", plain), ("plan", plan)):
            try:
                results[name] = run_plan_path(model, cfg, processor, microbatches)
                row[name] = "ran"
            except Exception as exc:  # noqa: BLE001  (what stops a path is the result)
                row[name] = f"{type(exc).__name__}: {exc}"
                row[f"{name}_traceback"] = traceback.format_exc(limit=-6)
        if len(results) == 2:
            a, b = results["plain"], results["plan"]
            assert a["grads"].keys() == b["grads"].keys()
            row.update(microbatches=len(b["outputs"]), n_grads=len(a["grads"]),
                       output_max_abs=max((x[k] - y[k]).abs().max().item()
                                          for x, y in zip(a["outputs"], b["outputs"]) for k in x),
                       grad_max_rel=max(((b["grads"][k] - g).abs().max() / g.abs().max().clamp(
                           min=1e-30)).item() for k, g in a["grads"].items()))
        rows[processor] = row
    dist.barrier()
    return {"megatron_core": version("megatron-core"), "te_names_defined_as_none": defined,
            "processors": rows}


MODES = {"tp_sp": run_tp_sp, "pp": run_pp, "cp": run_cp, "tp_vs_tp1": run_tp_vs_tp1,
         "schedule_plan": run_schedule_plan}


def worker(rank: int, mode: str, port: int, device: str, out: str) -> None:
    model_builder.init_distributed(rank, 2, port, 2 if mode == "tp_sp" else 1, device=device)
    results = MODES[mode](rank, device)
    torch.save(results, os.path.join(out, f"{mode}-rank{rank}.pt"))
    model_builder.shutdown()


def launch(mode: str, out: Path, device: str = "cuda") -> list:
    """Run ``mode``'s two ranks in a fresh process; each rank's saved results."""
    out.mkdir(parents=True, exist_ok=True)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONWARNINGS="ignore", NCCL_NVLS_ENABLE="0",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--mode", mode, "--out", str(out),
                           "--device", device], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(out / f"{mode}-rank{r}.pt", weights_only=False) for r in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=sorted(MODES), required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(worker, args=(args.mode, model_builder.free_port(), args.device, args.out), nprocs=2,
             join=True)


if __name__ == "__main__":
    main()
