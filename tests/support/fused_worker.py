"""Run the built-in processors on the tiny GPTModel and save what the tests compare.

    python fused_worker.py --tp 2 --out DIR

For SP off/on (on only when tp > 1) x tied/untied, on the same weights and batch:
``"fused_logprob"`` (by name, temperature 0.7) and a reference processor that materializes
the logits through the output layer, gathers the vocab shards and takes
``log_softmax(logits / T)``; each followed by backward of the same random combination of
log-probs and entropy. Also ``"fused_ce_loss"`` vs the default per-token loss, and
``"logits"`` vs the default logits. Saves ``DIR/rank{r}.pt``, with the messages of the
errors that bad inputs raise.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support import gpt_cpu  # noqa: E402
from megatron_overlay import model_builder  # noqa: E402

TEMPERATURE = 0.7


def step(model, cfg, processor, context, coeffs):
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    out = model(input_ids, position_ids, mask, labels=labels, output_processor=processor,
                output_processor_context=context)
    loss = (out["log_probs"] * coeffs[0]).sum() + (out["entropy"] * coeffs[1]).sum()
    loss.backward()
    model_builder.finalize_grads(model)
    result = {"log_probs": out["log_probs"].detach().clone(),
              "entropy": out["entropy"].detach().clone(), "grads": model_builder.grads(model)}
    model.zero_grad(set_to_none=True)
    return result


def processor(name: str, by_callable: bool):
    """A built-in by name, or (--callable) the plain function, as on an upstream 0.18 core
    without the overlay's name lookup."""
    if not by_callable:
        return name
    from megatron_overlay.processors import fused_logprob, logits

    return {"fused_logprob": fused_logprob.fused_logprob,
            "fused_ce_loss": fused_logprob.fused_ce_loss, "logits": logits.logits}[name]


def packed_case(model, cfg) -> dict:
    """THD-style [t, 1, h] hidden states (an SP shard of them at TP > 1), labels [1, t],
    straight into the processors: fused vs reference, values and input gradients."""
    from megatron.core import parallel_state

    tp = parallel_state.get_tensor_model_parallel_world_size()
    rank = parallel_state.get_tensor_model_parallel_rank()
    tokens = cfg.seq * cfg.batch
    gen = torch.Generator().manual_seed(11)
    full = torch.randn(tokens, 1, cfg.hidden, generator=gen)
    labels = torch.randint(0, cfg.vocab, (1, tokens), generator=gen)
    shard = full.chunk(tp)[rank] if cfg.sp else full
    weight = model.shared_embedding_or_output_weight() if cfg.tied else None
    common = dict(
        output_layer=model.output_layer, output_weight=weight, labels=labels, loss_mask=None,
        input_ids=None, position_ids=None, attention_mask=None, decoder_input=None,
        inference_context=None, packed_seq_params=None, runtime_gather_output=None,
        context={"temperature": TEMPERATURE},
        compute_language_model_loss=model.compute_language_model_loss,
        scale_logits=getattr(model, "_scale_logits", lambda logits: logits),
        config=model.config)
    out = {}
    for name, fn in (("fused", processor("fused_logprob", True)),
                     ("reference", model_builder.logits_path_logprob)):
        hidden = shard.clone().requires_grad_()
        res = fn(hidden_states=hidden, **common)
        (res["log_probs"].sum() * 0.3 + res["entropy"].sum() * 0.7).backward()
        out[name] = (res["log_probs"].detach(), res["entropy"].detach(), hidden.grad)
    model.zero_grad(set_to_none=True)
    return out


def run_config(cfg: model_builder.ModelConfig, results: dict, by_callable: bool = False) -> None:
    model = model_builder.build_model(cfg)
    gen = torch.Generator().manual_seed(7)
    coeffs = (torch.randn(cfg.batch, cfg.seq, generator=gen),
              torch.randn(cfg.batch, cfg.seq, generator=gen))
    context = {"temperature": TEMPERATURE}
    results[f"{cfg.name}/fused"] = step(model, cfg, processor("fused_logprob", by_callable),
                                        context, coeffs)
    results[f"{cfg.name}/reference"] = step(model, cfg, model_builder.logits_path_logprob, context,
                                            coeffs)

    input_ids, position_ids, mask, labels, loss_mask = model_builder.batch(cfg)
    loss_mask[:, :3] = 0
    with torch.no_grad():
        default_loss = model(input_ids, position_ids, mask, labels=labels)
        fused_loss = model(input_ids, position_ids, mask, labels=labels, loss_mask=loss_mask,
                           output_processor=processor("fused_ce_loss", by_callable))
    results[f"{cfg.name}/ce"] = (default_loss * loss_mask, fused_loss)
    if not cfg.mtp_layers:  # pre-0.17 MTP asserts that labels are given
        with torch.no_grad():
            default_logits = model(input_ids, position_ids, mask)
            named_logits = model(input_ids, position_ids, mask,
                                 output_processor=processor("logits", by_callable))
        results[f"{cfg.name}/logits"] = (default_logits, named_logits)
        results[f"{cfg.name}/packed"] = packed_case(model, cfg)
    results[f"{cfg.name}/logit_scale"] = getattr(model.config, "mup_output_mult", None) \
        if cfg.mup else None


def bf16_head_logprob(*, hidden_states, output_layer, output_weight, labels, context,
                      scale_logits, **_):
    """The reference of ``logits_dtype="bfloat16"``: the logits path with every logit
    rounded to bf16 (the gradient passing through the rounding, as through a cast)."""
    def rounded(logits):
        logits = scale_logits(logits)
        return logits + (logits.bfloat16().float() - logits).detach()
    return model_builder.logits_path_logprob(
        hidden_states=hidden_states, output_layer=output_layer, output_weight=output_weight,
        labels=labels, context=context, scale_logits=rounded)


def fp32_head_logprob(*, hidden_states, **kwargs):
    """The reference of an fp32 output weight under 16-bit hidden states: the logits path on
    the hidden states upcast (what a framework's fp32 LM head does, with a copy)."""
    return model_builder.logits_path_logprob(hidden_states=hidden_states.float(), **kwargs)


def precision_cases(world: int, results: dict) -> None:
    """The heads of issue 18 through the hook, SP on at TP > 1: ``logits_dtype="bfloat16"``
    on an fp32 model (GPTModel and the hybrid model), and a bf16 model whose output weight
    is fp32 (an fp32 head: mixed operands, no copy) against their references."""
    gen = torch.Generator().manual_seed(7)
    for model_class in ("gpt", "hybrid"):
        cfg = model_builder.ModelConfig(tp=world, sp=world > 1, tied=False, model=model_class)
        coeffs = (torch.randn(cfg.batch, cfg.seq, generator=gen),
                  torch.randn(cfg.batch, cfg.seq, generator=gen))
        model = model_builder.build_model(cfg)
        rounding = {"temperature": TEMPERATURE, "logits_dtype": "bfloat16"}
        results[f"precision/{model_class}/round"] = {
            "fused": step(model, cfg, "fused_logprob", rounding, coeffs),
            "reference": step(model, cfg, bf16_head_logprob, rounding, coeffs),
            "fp32": step(model, cfg, "fused_logprob", {"temperature": TEMPERATURE}, coeffs)}
    cfg = model_builder.ModelConfig(tp=world, sp=world > 1, tied=False, dtype=torch.bfloat16)
    model = model_builder.build_model(cfg)
    model.output_layer.weight.data = model.output_layer.weight.data.float()
    context = {"temperature": TEMPERATURE}
    results["precision/fp32_head"] = {
        "fused": step(model, cfg, "fused_logprob", context, coeffs),
        "reference": step(model, cfg, fp32_head_logprob, context, coeffs),
        "weight_dtype": model.output_layer.weight.dtype}


def collect_errors(cfg: model_builder.ModelConfig) -> dict:
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    cases = {
        "no_labels": dict(labels=None, ctx={"temperature": 1.0}),
        "zero_temperature": dict(labels=labels, ctx={"temperature": 0.0}),
        "nan_temperature": dict(labels=labels, ctx={"temperature": float("nan")}),
        "str_temperature": dict(labels=labels, ctx={"temperature": "hot"}),
        "label_too_big": dict(labels=labels.clone().fill_(cfg.vocab + 5), ctx=None),
        "label_negative": dict(labels=labels.clone().fill_(-3), ctx=None),
        # one bad label at [batch 1, position 2]: the ops' rows run position-major
        "label_one_bad": dict(labels=labels.clone().index_put_(
            (torch.tensor([1]), torch.tensor([2])), torch.tensor(cfg.vocab + 5)), ctx=None),
        "label_shape": dict(labels=labels[:, :-1], ctx=None),
        "label_dtype": dict(labels=labels.float(), ctx=None),
        "unknown_name": dict(labels=labels, ctx=None, processor="no_such_processor"),
        "misspelled_context_key": dict(labels=labels, ctx={"temprature": 0.7}),
        "bad_logits_dtype": dict(labels=labels, ctx={"logits_dtype": "int8"}),
    }
    errors = {}
    runs = [(model, cases)]
    if gpt_cpu._has_mup():  # MuP's output scale is folded into T: errors name the caller's
        mup_cfg = model_builder.ModelConfig(tp=cfg.tp, sp=cfg.sp, tied=False, mup=True)
        runs.append((model_builder.build_model(mup_cfg), {
            "mup_folds_out_of_range": dict(labels=labels, ctx={"temperature": 2.0 ** 66}),
            "mup_tensor_folds_out_of_range": dict(labels=labels, ctx={
                "temperature": torch.full((cfg.batch,), 2.0 ** 66)})}))
    for run_model, run_cases in runs:
        for name, case in run_cases.items():
            try:
                run_model(input_ids, position_ids, mask, labels=case["labels"],
                          output_processor=case.get("processor", "fused_logprob"),
                          output_processor_context=case["ctx"])
                errors[name] = ("no error", "")
            except (ValueError, TypeError) as err:
                errors[name] = (type(err).__name__, str(err))
    return errors


def worker(rank: int, world: int, port: int, out: str, by_callable: bool) -> None:
    model_builder.init_distributed(rank, world, port, world)
    results: dict = {}
    # callables are for an upstream native core, whose hybrid model has no hook at all
    for cfg in gpt_cpu.gpt_configs(world) if by_callable else gpt_cpu.configs(world):
        run_config(cfg, results, by_callable)
    if not by_callable:
        results["errors"] = collect_errors(model_builder.ModelConfig(tp=world))
        precision_cases(world, results)
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    model_builder.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=["by-name", "callable"], default="by-name")
    args = parser.parse_args()
    mp.spawn(worker, args=(args.tp, model_builder.free_port(), args.out, args.mode == "callable"),
             nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
