"""Two ranks (NCCL, one GPU each; gloo on CPU for a dry run) running megatron's GPTModel
with ``output_processor="fused_logprob"`` by name, saving what tests/core/test_multi_gpu.py
compares.

    python multi_gpu_worker.py --mode tp_sp --out DIR [--device cuda]
    python multi_gpu_worker.py --mode pp --out DIR
    python multi_gpu_worker.py --mode cp --out DIR

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

Saves DIR/<mode>-rank{r}.pt.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback

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


MODES = {"tp_sp": run_tp_sp, "pp": run_pp, "cp": run_cp}


def worker(rank: int, mode: str, port: int, device: str, out: str) -> None:
    model_builder.init_distributed(rank, 2, port, 2 if mode == "tp_sp" else 1, device=device)
    results = MODES[mode](rank, device)
    torch.save(results, os.path.join(out, f"{mode}-rank{rank}.pt"))
    model_builder.shutdown()


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
