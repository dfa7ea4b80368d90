"""The configurations the CPU equivalence tests run (gloo, TP 1 and 2).

Model building, parallel init and the CPU shims live in ``megatron_overlay/model_builder.py``,
shared with the demo and the tools (tools never import tests).
"""

from __future__ import annotations

from megatron_overlay.model_builder import ModelConfig


def configs(tp: int) -> list[ModelConfig]:
    """What the equivalence tests cover, on GPTModel and on the hybrid model: SP off/on (on
    needs TP > 1) x tied/untied, plus MTP (hybrid: 0.17+), plus MuP where the core has it
    (0.17+), plus an MoE layer in the hybrid pattern (0.17+: earlier MoE needs TE here)."""
    return gpt_configs(tp) + hybrid_configs(tp)


def _has_mup() -> bool:
    from megatron.core.transformer.transformer_config import TransformerConfig

    return "use_mup" in TransformerConfig.__dataclass_fields__


def _base(tp: int, **kwargs) -> list[ModelConfig]:
    return [ModelConfig(tp=tp, sp=sp, tied=tied, **kwargs)
            for sp in ([False, True] if tp > 1 else [False]) for tied in (True, False)]


def gpt_configs(tp: int) -> list[ModelConfig]:
    out = _base(tp)
    out.append(ModelConfig(tp=tp, sp=False, tied=True, mtp_layers=1))  # MTP norms: no SP on CPU
    if _has_mup():
        out.append(ModelConfig(tp=tp, sp=tp > 1, tied=False, mup=True))
    return out


def _moe_runs_without_te() -> bool:
    """0.14-0.16's MoE router reads ``te_general_gemm``, which moe_utils defines only when
    Transformer Engine imports (NameError here); 0.17+ sets it to None without TE."""
    from megatron.core.transformer.moe import moe_utils

    return hasattr(moe_utils, "te_general_gemm")


def hybrid_configs(tp: int) -> list[ModelConfig]:
    from megatron_overlay.model_builder import hybrid_layer_symbols

    symbols = hybrid_layer_symbols()
    out = _base(tp, model="hybrid")
    if "/" in symbols:  # 0.17+: MTP layers after "/" in the pattern
        out.append(ModelConfig(tp=tp, sp=False, tied=True, mtp_layers=1, model="hybrid"))
    if _has_mup():
        out.append(ModelConfig(tp=tp, sp=tp > 1, tied=False, mup=True, model="hybrid"))
    if "E" in symbols and _moe_runs_without_te():  # 0.17+
        out.append(ModelConfig(tp=tp, sp=tp > 1, tied=False, moe=True, model="hybrid"))
    return out
