"""Hybrid-model checks beyond the shared workers: one gloo rank, the installed (or
PYTHONPATH's) core, one JSON line out.

    PYTHONPATH=CORE_TREE:REPO python hybrid_worker.py

- ``detect``: what a framework sees that looks for the hook in
  ``inspect.signature(model.forward)`` (verl, SkyRL), and whether ``"fused_logprob"`` by
  name then returns log-probs and entropy.
- ``packed``: a non-None ``packed_seq_params``: the error raised, or that the processor
  received the very object.
- ``inference``: a forward under megatron's inference mode with a static inference
  context (0.18+), on the GPTModel and the hybrid model: whether the processor ran, with
  which hidden-state shape and context.
- ``no_output_layer``: a model chunk without the output layer (a non-last pipeline stage),
  GPTModel and hybrid, called with a processor: whether it ran, and what came back.
- ``graph_bypass``: the hybrid model's block-scope inference CUDA-graph test
  (``_should_call_local_cudagraph``, 0.18+) with every condition for replay met, without
  and with a processor.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from megatron_overlay import model_builder  # noqa: E402


def _outcome(call):
    try:
        return ["ok", call()]
    except Exception as err:  # the kind and the message are what the test compares
        return [type(err).__name__, str(err)]


def recording(calls):
    def processor(**kwargs):
        calls.append({"hidden_shape": list(kwargs["hidden_states"].shape),
                      "packed_seq_params": kwargs["packed_seq_params"],
                      "inference_context": kwargs["inference_context"]})
        return "processed"
    return processor


def detect(model, cfg) -> dict:
    params = inspect.signature(model.forward).parameters
    hooked = "output_processor" in params and "output_processor_context" in params
    out = {"hooked": hooked}
    if hooked:
        input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
        result = model(input_ids, position_ids, mask, labels=labels,
                       output_processor="fused_logprob",
                       output_processor_context={"temperature": 0.7})
        out["fields"] = sorted(k for k in ("log_probs", "entropy") if result[k] is not None)
        out["shape"] = list(result["log_probs"].shape)
    return out


def packed(model, cfg) -> list:
    from megatron.core.packed_seq_params import PackedSeqParams

    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    params = PackedSeqParams(qkv_format="thd")
    calls = []

    def call():
        model(input_ids, position_ids, mask, labels=labels, packed_seq_params=params,
              output_processor=recording(calls))
        return calls[0]["packed_seq_params"] is params
    return _outcome(call)


def inference(model, cfg) -> list:
    import torch
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    input_ids, position_ids, mask, _, _ = model_builder.batch(cfg)
    context = StaticInferenceContext(cfg.batch, cfg.seq)
    calls = []

    def call():
        model.eval()
        with InferenceMode.active(), torch.no_grad():
            out = model(input_ids, position_ids, mask, inference_context=context,
                        runtime_gather_output=True, output_processor=recording(calls))
        return {"returned": out, "calls": len(calls), "hidden_shape": calls[0]["hidden_shape"],
                "context_is_callers": calls[0]["inference_context"] is context}
    return _outcome(call)


def no_output_layer(kind: str) -> dict:
    """What a chunk without the output layer returns when given a processor."""
    cfg = model_builder.ModelConfig(model=kind, output_layer=False)
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    calls = []
    out = model(input_ids, position_ids, mask, labels=labels, output_processor=recording(calls))
    return {"calls": len(calls), "shape": list(out.shape),
            "has_output_layer": hasattr(model, "output_layer")}


def graph_bypass(model, cfg) -> dict:
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode
    from megatron.core.transformer.enums import InferenceCudaGraphScope

    context = StaticInferenceContext(cfg.batch, cfg.seq)
    context.decode_mode = True  # a decode step: what block-scope graphs replay
    model.cudagraph_manager = object()  # present, as after create_mcore_cudagraph_manager
    model.config.inference_cuda_graph_scope = InferenceCudaGraphScope.block
    with InferenceMode.active():
        return {"without": model._should_call_local_cudagraph(inference_context=context),
                "with": model._should_call_local_cudagraph(
                    inference_context=context, output_processor=lambda **_: None)}


def main() -> None:
    model_builder.init_distributed(0, 1, model_builder.free_port(), 1)
    results = {}
    hybrid_cfg = model_builder.ModelConfig(model="hybrid")
    model = model_builder.build_model(hybrid_cfg)
    results["class"] = type(model).__name__
    results["detect"] = detect(model, hybrid_cfg)
    if results["detect"]["hooked"]:
        results["packed"] = packed(model, hybrid_cfg)
        results["no_output_layer"] = {kind: no_output_layer(kind) for kind in ("gpt", "hybrid")}
        if hasattr(model, "_should_call_local_cudagraph"):  # 0.18+
            results["inference"] = {
                "hybrid": inference(model, hybrid_cfg),
                "gpt": inference(model_builder.build_model(model_builder.ModelConfig()),
                                 model_builder.ModelConfig())}
            results["graph_bypass"] = graph_bypass(model_builder.build_model(hybrid_cfg),
                                                   hybrid_cfg)
    print(json.dumps(results))
    model_builder.shutdown()


if __name__ == "__main__":
    main()
