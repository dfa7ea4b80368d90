"""Run the distillation processors on the tiny GPTModel and save what the tests compare.

    python distill_worker.py --tp 2 --out DIR

For every gpt_cpu configuration (SP off/on x tied/untied, MTP, MuP where the core has it),
on the same weights and batch, each followed by backward of a fixed random combination:
  topk     "fused_topk_logprobs" (k=5, per-token temperature [b, s], labels given)
  at       "fused_logprobs_at" (7 ids per token, per-sample temperature [b], entropy)
  logprob  "fused_logprob" with a per-token temperature [b, s]
  ce       "fused_ce_loss" with a per-sample temperature [b]
against a reference processor that materializes the logits through the output layer,
gathers the vocab shards and takes log_softmax(logits / T) in fp32 (top-k by a stable
sort: ties to the lower id). Also packed THD input straight into the processors, top-k
ties across the two vocab shards (op level, on the same gloo group), and the messages of
the errors bad inputs raise. Saves ``DIR/rank{r}.pt``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy
import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support import gpt_cpu  # noqa: E402
from megatron_overlay import model_builder  # noqa: E402

K_TOP = 5
K_AT = 7


def reference(*, hidden_states, output_layer, output_weight, labels, context, scale_logits,
              **_):
    """Everything the fused processors return, from the materialized logits ([b, s, ...])."""
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    logits, _ = output_layer(hidden_states, weight=output_weight, runtime_gather_output=False)
    logits = gather_from_tensor_model_parallel_region(scale_logits(logits)).float()
    logits = logits.transpose(0, 1)  # [b, s, v]
    temperature = context["temperature"]
    if isinstance(temperature, torch.Tensor) and temperature.dim() == 1:
        temperature = temperature[:, None]
    if isinstance(temperature, torch.Tensor):
        temperature = temperature[..., None]
    logp = torch.log_softmax(logits / temperature, dim=-1)
    out = {"entropy": -(logp.exp() * logp).sum(-1)}
    if labels is not None:
        out["log_probs"] = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    if "k" in context:
        order = logp.detach().argsort(dim=-1, descending=True, stable=True)[..., :context["k"]]
        out["topk_ids"], out["topk_log_probs"] = order, logp.gather(-1, order)
    if "token_ids" in context:
        out["at"] = logp.gather(-1, context["token_ids"])
    return out


def _loss(kind: str, out, coeffs) -> torch.Tensor:
    if kind == "topk":
        return ((out["topk_log_probs"] * coeffs["topk"]).sum()
                + (out["log_probs"] * coeffs["bs"][0]).sum()
                + (out["entropy"] * coeffs["bs"][1]).sum())
    if kind == "at":
        at = out["log_probs"] if "at" not in out.keys() else out["at"]
        return (at * coeffs["at"]).sum() + (out["entropy"] * coeffs["bs"][1]).sum()
    if kind == "logprob":
        return (out["log_probs"] * coeffs["bs"][0]).sum() + (out["entropy"] * coeffs["bs"][1]).sum()
    raise ValueError(kind)


def _kept(kind: str, out, fused: bool) -> dict:
    names = {"topk": ("topk_ids", "topk_log_probs", "log_probs", "entropy"),
             "at": ("at", "entropy"), "logprob": ("log_probs", "entropy")}[kind]
    kept = {}
    for name in names:
        key = "log_probs" if (fused and kind == "at" and name == "at") else name
        kept[name] = out[key].detach().clone()
    return kept


def contexts(cfg: model_builder.ModelConfig) -> dict:
    gen = torch.Generator().manual_seed(5)
    per_token = 0.5 + torch.rand(cfg.batch, cfg.seq, generator=gen)
    per_sample = torch.tensor([0.6, 1.4])[:cfg.batch]
    token_ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq, K_AT), generator=gen)
    return {
        "topk": ("fused_topk_logprobs", {"k": K_TOP, "temperature": per_token}),
        "at": ("fused_logprobs_at", {"token_ids": token_ids, "temperature": per_sample,
                                     "return_entropy": True}),
        "logprob": ("fused_logprob", {"temperature": per_token}),
    }


def run_config(cfg: model_builder.ModelConfig, results: dict) -> None:
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    gen = torch.Generator().manual_seed(7)
    coeffs = {"topk": torch.randn(cfg.batch, cfg.seq, K_TOP, generator=gen),
              "at": torch.randn(cfg.batch, cfg.seq, K_AT, generator=gen),
              "bs": torch.randn(2, cfg.batch, cfg.seq, generator=gen)}
    for kind, (name, context) in contexts(cfg).items():
        for side, processor in (("fused", name), ("reference", reference)):
            ctx = dict(context)
            if side == "reference" and kind == "topk":
                ctx["k"] = K_TOP
            out = model(input_ids, position_ids, mask, labels=labels,
                        output_processor=processor, output_processor_context=ctx)
            _loss(kind, out, coeffs).backward()
            model_builder.finalize_grads(model)
            results[f"{cfg.name}/{kind}/{side}"] = dict(_kept(kind, out, side == "fused"),
                                                        grads=model_builder.grads(model))
            model.zero_grad(set_to_none=True)
    # fused_ce_loss with a per-sample temperature: -log p(label) at T_b
    per_sample = torch.tensor([0.6, 1.4])[:cfg.batch]
    with torch.no_grad():
        ce = model(input_ids, position_ids, mask, labels=labels, output_processor="fused_ce_loss",
                   output_processor_context={"temperature": per_sample})
        ref = model(input_ids, position_ids, mask, labels=labels, output_processor=reference,
                    output_processor_context={"temperature": per_sample})
    results[f"{cfg.name}/ce"] = (ce, -ref["log_probs"])
    if not cfg.mtp_layers:
        results[f"{cfg.name}/packed"] = packed_case(model, cfg)


def packed_case(model, cfg) -> dict:
    """THD-style [t, 1, h] hidden states (an SP shard at TP > 1), labels [1, t], token_ids
    [1, t, k], temperature [1, t], straight into the processors: values and d_hidden."""
    from megatron.core import parallel_state

    from megatron_overlay.processors.fused_logprobs_at import fused_logprobs_at
    from megatron_overlay.processors.fused_topk_logprobs import fused_topk_logprobs

    tp = parallel_state.get_tensor_model_parallel_world_size()
    rank = parallel_state.get_tensor_model_parallel_rank()
    tokens = cfg.seq * cfg.batch
    gen = torch.Generator().manual_seed(11)
    full = torch.randn(tokens, 1, cfg.hidden, generator=gen)
    labels = torch.randint(0, cfg.vocab, (1, tokens), generator=gen)
    temperature = 0.5 + torch.rand(1, tokens, generator=gen)
    token_ids = torch.randint(0, cfg.vocab, (1, tokens, K_AT), generator=gen)
    shard = full.chunk(tp)[rank] if cfg.sp else full
    weight = model.shared_embedding_or_output_weight() if cfg.tied else None
    common = dict(
        output_layer=model.output_layer, output_weight=weight, labels=labels, loss_mask=None,
        input_ids=None, position_ids=None, attention_mask=None, decoder_input=None,
        inference_context=None, packed_seq_params=None, runtime_gather_output=None,
        compute_language_model_loss=model.compute_language_model_loss,
        scale_logits=getattr(model, "_scale_logits", lambda logits: logits),
        config=model.config)
    out = {}
    for kind, fn, ctx in (
            ("topk", fused_topk_logprobs, {"k": K_TOP, "temperature": temperature}),
            ("at", fused_logprobs_at, {"token_ids": token_ids, "temperature": temperature})):
        for side, proc in (("fused", fn), ("reference", reference)):
            hidden = shard.clone().requires_grad_()
            c = dict(ctx, k=K_TOP) if (side == "reference" and kind == "topk") else ctx
            res = proc(hidden_states=hidden, context=c, **common)
            if kind == "topk":
                values, ids = res["topk_log_probs"], res["topk_ids"]
            else:
                values = res["log_probs"] if side == "fused" else res["at"]
                ids = token_ids
            (values * torch.linspace(-1, 1, values.numel()).view_as(values)).sum().backward()
            out[f"{kind}/{side}"] = (ids.clone(), values.detach().clone(), hidden.grad)
    model.zero_grad(set_to_none=True)
    return out


def ties_across_shards() -> dict:
    """Equal logits in both vocab shards: the top-k takes rank 0's (lower) ids first."""
    from megatron.core import parallel_state

    from megatron_overlay.ops import linear_topk_logprobs

    group = parallel_state.get_tensor_model_parallel_group()
    tp = parallel_state.get_tensor_model_parallel_world_size()
    rank = parallel_state.get_tensor_model_parallel_rank()
    gen = torch.Generator().manual_seed(3)
    full = torch.randn(16 * tp, 8, generator=gen) * 0.1
    top = torch.randn(8, generator=gen)
    for row in (5, 9, 16 * tp - 3, 16 * (tp - 1) + 2):  # ties in the first and last shard
        full[row] = top
    hidden = torch.stack([top * 4.0] * 3)
    shard = full.chunk(tp)[rank]
    out = linear_topk_logprobs(hidden, shard, 3, tp_group=group)
    return {"ids": out.topk_ids, "log_probs": out.topk_log_probs, "tp": tp}


def collect_errors(cfg: model_builder.ModelConfig) -> dict:
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    b, s, v = cfg.batch, cfg.seq, cfg.vocab
    ids = torch.randint(0, v, (b, s, 3))
    topk, at = "fused_topk_logprobs", "fused_logprobs_at"
    cases = {
        "k_missing": (topk, {"temperature": 1.0}),
        "k_zero": (topk, {"k": 0}),
        "k_too_big": (topk, {"k": 257}),
        "k_above_vocab": (topk, {"k": v + 1}),
        "k_float": (topk, {"k": 2.0}),
        "topk_unknown_key": (topk, {"k": 2, "temprature": 0.5}),
        "ids_missing": (at, {}),
        "ids_too_big": (at, {"token_ids": ids + v}),
        "ids_negative": (at, {"token_ids": ids - v}),
        "ids_one_bad": (at, {"token_ids": ids.clone().index_put_(
            (torch.tensor([1]), torch.tensor([2]), torch.tensor([1])), torch.tensor(v))}),
        "topk_label_one_bad": (topk, {"k": 2}, labels.clone().index_put_(
            (torch.tensor([0]), torch.tensor([5])), torch.tensor(-7))),
        "ids_shape": (at, {"token_ids": ids[:, :-1]}),
        "ids_dtype": (at, {"token_ids": ids.float()}),
        "at_unknown_key": (at, {"token_ids": ids, "k": 3}),
        "temperature_shape": (topk, {"k": 2, "temperature": torch.ones(s, b)}),
        "temperature_zero_entry": (at, {"token_ids": ids, "temperature":
                                        torch.ones(b, s).index_fill_(1, torch.tensor([3]), 0.0)}),
        "temperature_nan_entry": (topk, {"k": 2, "temperature":
                                         torch.tensor([1.0, float("nan")])[:b]}),
        "temperature_int_tensor": ("fused_logprob", {"temperature": torch.ones(b, s,
                                                                          dtype=torch.int64)}),
        "logprob_temperature_shape": ("fused_logprob", {"temperature": torch.ones(b + 1)}),
        # a list of labels: an AttributeError from inside the processor before
        "labels_list": (topk, {"k": 2}, labels.tolist()),
        "logprob_labels_list": ("fused_logprob", {}, labels.tolist()),
        # not options: ran at every default (T = 1) before
        "context_array": ("fused_logprob", numpy.array(0.7)),
        # the temperature gets no gradient: refused rather than left without one
        "temperature_requires_grad": (topk, {"k": 2, "temperature":
                                             torch.full((b,), 0.7, requires_grad=True)}),
    }
    errors = {}
    for name, (processor, ctx, *own_labels) in cases.items():  # a case's own labels
        try:
            model(input_ids, position_ids, mask, labels=own_labels[0] if own_labels else labels,
                  output_processor=processor, output_processor_context=ctx)
            errors[name] = ("no error", "")
        except (ValueError, TypeError) as err:
            errors[name] = (type(err).__name__, str(err))
    return errors


def entropy_without_labels(cfg: model_builder.ModelConfig) -> dict:
    """The top-k processor's entropy without labels: given where the context asks for it
    (``return_entropy=True``), None by default; ``fused_logprob``'s entropy (with labels)
    as the reference."""
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    with torch.no_grad():
        asked = model(input_ids, position_ids, mask, output_processor="fused_topk_logprobs",
                      output_processor_context={"k": 2, "temperature": 0.8,
                                                "return_entropy": True})
        default = model(input_ids, position_ids, mask, output_processor="fused_topk_logprobs",
                        output_processor_context={"k": 2, "temperature": 0.8})
        ref = model(input_ids, position_ids, mask, labels=labels,
                    output_processor="fused_logprob", output_processor_context={
                        "temperature": 0.8})
    return {"asked": asked.entropy, "default": default.entropy, "reference": ref.entropy}


def worker(rank: int, world: int, port: int, out: str) -> None:
    model_builder.init_distributed(rank, world, port, world)
    results: dict = {}
    for cfg in gpt_cpu.configs(world):
        run_config(cfg, results)
    results["ties"] = ties_across_shards()
    results["errors"] = collect_errors(model_builder.ModelConfig(tp=world))
    results["entropy_without_labels"] = entropy_without_labels(model_builder.ModelConfig(tp=world))
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    model_builder.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    mp.spawn(worker, args=(args.tp, model_builder.free_port(), args.out), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
