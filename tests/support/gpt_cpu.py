"""The configurations the CPU equivalence tests run (gloo, TP 1 and 2).

Model building, parallel init and the CPU shims live in ``tools/gpt_setup.py``, shared with
tools/tp_check.py (tools never import tests).
"""

from __future__ import annotations

from tools.gpt_setup import ModelConfig


def configs(tp: int) -> list[ModelConfig]:
    """What the equivalence tests cover: SP off/on (on needs TP > 1) x tied/untied, plus MTP,
    plus MuP where the core has it (0.17+)."""
    out = [ModelConfig(tp=tp, sp=sp, tied=tied)
           for sp in ([False, True] if tp > 1 else [False]) for tied in (True, False)]
    out.append(ModelConfig(tp=tp, sp=False, tied=True, mtp_layers=1))  # MTP norms: no SP on CPU
    from megatron.core.transformer.transformer_config import TransformerConfig

    if "use_mup" in TransformerConfig.__dataclass_fields__:
        out.append(ModelConfig(tp=tp, sp=tp > 1, tied=False, mup=True))
    return out
