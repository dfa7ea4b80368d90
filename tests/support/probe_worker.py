"""Ask ``require_output_processor`` about a real tiny GPTModel and hybrid model, then try
the same calls.

    PYTHONPATH=CORE_TREE:REPO python probe_worker.py

Which megatron is imported is decided by PYTHONPATH (an upstream or a patched tree). For
each model ("gpt", "hybrid") and processor (none, the ``fused_logprob`` callable, the name
``"fused_logprob"``, an unknown name) it prints, in one JSON line, what the probe raised
and what the model's forward itself then did with that processor; and ("wrapped_gpt")
what the probe says of the GPTModel inside a wrapper module.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from megatron_overlay import model_builder  # noqa: E402


def _outcome(call) -> list[str]:
    try:
        call()
        return ["ok", ""]
    except Exception as err:  # the kind and the message are what the test compares
        return [type(err).__name__, str(err)]


def main() -> None:
    from megatron_overlay import require_output_processor
    from megatron_overlay.processors.fused_logprob import fused_logprob

    model_builder.init_distributed(0, 1, model_builder.free_port(), 1)
    results = {}
    models = {}
    for kind in ("gpt", "hybrid"):
        cfg = model_builder.ModelConfig(model=kind)
        model = models[kind] = model_builder.build_model(cfg)
        input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
        results[kind] = {}
        for case, processor in [("none", None), ("callable", fused_logprob),
                                ("name", "fused_logprob"), ("unknown_name", "fused_logporb")]:
            hook = {} if processor is None else dict(
                output_processor=processor, output_processor_context={"temperature": 0.7})
            results[kind][case] = {
                "probe": _outcome(lambda: require_output_processor(model, processor=processor)),
                "forward": _outcome(lambda: model(input_ids, position_ids, mask, labels=labels,
                                                  **hook)),
            }
    # a wrapper (as DDP is) whose forward passes everything on: the probe reads the
    # forward's signature, so it sends the caller to the megatron model itself
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    results["wrapped_gpt"] = {"probe": _outcome(lambda: require_output_processor(
        Wrapper(models["gpt"]), processor=fused_logprob))}
    print(json.dumps(results))
    model_builder.shutdown()


if __name__ == "__main__":
    main()
