"""Build megatron-core's real GPTModel and hybrid model (MambaModel before 0.18, HybridModel
from 0.18), small and seeded, on CPU (gloo) or CUDA (NCCL): the one model builder of the
demo, the example, the tools and the tests.

Nothing of the library (patching, the hook, processors, ops) imports this module. The
workarounds below exist only because the demo and the checks run megatron without a GPU, or
without Apex and Transformer Engine (see ../shared/notes/megatron-on-cpu.md), and they apply
only in a process that builds its model here:

- CPU only: ``torch.cuda.current_device()`` must answer "cpu" (megatron allocates on it),
  and the RNG tracker is the inference one (its add/fork do nothing; CUDA RNG states don't
  exist there). On CUDA the real ``model_parallel_cuda_manual_seed`` runs instead.
- CPU and CUDA: the local spec's ``WrappedTorchNorm`` asserts that sequence parallel is
  unsupported; it is built without SP and its parameters marked ``sequence_parallel``, and
  ``finalize_grads`` all-reduces those grads over TP as ``finalize_model_grads`` does.
- 16-bit models are cast the way megatron's ``Float16Module`` casts them
  (``module.bfloat16()``): torch's norms are created in fp32 whatever ``params_dtype`` says,
  which CPU kernels tolerate and CUDA's ``layer_norm`` rejects ("expected scalar type
  BFloat16 but found Float").
- The causal mask is passed explicitly (the default one is built on ``device="cuda"``).
- Hybrid models: Mamba layers need mamba_ssm's CUDA extension, so the layer pattern holds
  attention (``*``), MLP (``-``) and MoE (``E``; megatron's MoE runs without TE from 0.17)
  layers only, built from the local GPT spec's submodules; Mamba layers themselves are not
  exercised. The stack's final norm is Transformer Engine's ``TENorm``, hard-wired in the
  stack module: it is
  swapped for the SP-safe ``WrappedTorchNorm`` below, and on 0.12, whose TE extension
  module imports Transformer Engine unconditionally, a stand-in for that module offers
  ``TENorm`` alone.
"""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

VOCAB = 128
HIDDEN = 64
SEQ = 32
BATCH = 2


@dataclass(frozen=True)
class ModelConfig:
    tp: int = 1
    sp: bool = False
    tied: bool = True
    vocab: int = VOCAB
    hidden: int = HIDDEN
    layers: int = 2
    heads: int = 4
    seq: int = SEQ
    batch: int = BATCH
    dtype: torch.dtype = torch.float32
    mtp_layers: int = 0
    mup: bool = False
    pp: int = 1
    model: str = "gpt"  # or "hybrid": megatron's hybrid model class (see hybrid_model_class)
    position_embedding: str = "rope"  # GPTModel's position_embedding_type
    max_positions: int = 0  # GPTModel's max_sequence_length; 0: seq
    rotary_base: int = 10000  # GPTModel's (Qwen2.5: 1000000)
    # False: a chunk without the output layer (what a non-last pipeline stage builds), PP 1
    output_layer: bool = True
    moe: bool = False  # hybrid only: an MoE layer ("E") in the pattern (0.16+; TE-free 0.17+)

    @property
    def name(self) -> str:
        return (("hybrid-" if self.model == "hybrid" else "")
                + f"tp{self.tp}-sp{int(self.sp)}-{'tied' if self.tied else 'untied'}"
                + (f"-pp{self.pp}" if self.pp > 1 else "")
                + (f"-mtp{self.mtp_layers}" if self.mtp_layers else "")
                + ("-mup" if self.mup else "") + ("-moe" if self.moe else ""))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def apply_cpu_shims() -> None:
    torch.cuda.current_device = lambda: "cpu"  # megatron allocates on current_device()


def init_distributed(rank: int, world_size: int, port: int, tp: int, device: str = "cpu",
                     pp: int = 1, ep: int = 1) -> None:
    """gloo on CPU (with the CPU shims); NCCL, one GPU per rank, on CUDA."""
    if device == "cpu":
        apply_cpu_shims()
        torch.set_num_threads(1)  # bit-exact repeatability across runs
    else:
        torch.cuda.set_device(rank)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo" if device == "cpu" else "nccl", rank=rank,
                            world_size=world_size)
    init_model_parallel(tp, pp, ep)


def init_model_parallel(tp: int, pp: int = 1, ep: int = 1, cp: int = 1) -> None:
    """(Re)build megatron's parallel groups on the existing process group."""
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    kwargs = {"expert_model_parallel_size": ep} if ep > 1 else {}
    if cp > 1:
        kwargs["context_parallel_size"] = cp
    parallel_state.initialize_model_parallel(tp, pp, **kwargs)


def shutdown() -> None:
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


class SequenceParallelSafeNorm:
    """megatron's WrappedTorchNorm, built without SP and marked the way SP norms are."""

    def __new__(cls, config, hidden_size, eps=1e-5):
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        plain = copy.copy(config)
        plain.sequence_parallel = False
        norm = WrappedTorchNorm(plain, hidden_size, eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm


def layer_spec(**local_spec_kwargs):
    """The local layer spec (MoE too, through ``num_experts=``) with SP-safe torch norms."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec(**local_spec_kwargs)
    spec.submodules.input_layernorm = SequenceParallelSafeNorm
    spec.submodules.pre_mlp_layernorm = SequenceParallelSafeNorm
    return spec


def transformer_config(cfg: ModelConfig, **overrides):
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(
        num_layers=cfg.layers, hidden_size=cfg.hidden, num_attention_heads=cfg.heads,
        use_cpu_initialization=True, tensor_model_parallel_size=cfg.tp,
        pipeline_model_parallel_size=cfg.pp,
        sequence_parallel=cfg.sp, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=cfg.dtype, bf16=cfg.dtype == torch.bfloat16,
        pipeline_dtype=cfg.dtype,
    )
    if cfg.mup:  # MuP: logits scaled by mup_output_mult = 1 / width_mult = 1/4 here
        kwargs.update(use_mup=True, mup_base_hidden_size=cfg.hidden // 4)
    if cfg.mtp_layers:
        kwargs.update(mtp_num_layers=cfg.mtp_layers, mtp_loss_scaling_factor=0.1)
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)


def seed_model_parallel(seed: int, device: str) -> None:
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    if device == "cpu":
        # model_parallel_cuda_manual_seed needs CUDA; the inference tracker's add/fork do nothing.
        tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True)
    else:
        tensor_parallel.model_parallel_cuda_manual_seed(seed)


def _stage(cfg: ModelConfig) -> tuple[bool, bool]:
    """(pre_process, post_process) of this rank's model chunk."""
    from megatron.core import parallel_state

    if cfg.pp > 1:
        return parallel_state.is_pipeline_first_stage(), parallel_state.is_pipeline_last_stage()
    return True, cfg.output_layer


def build_model(cfg: ModelConfig, seed: int = 1234, device: str = "cpu",
                spec=None, **config_overrides):
    """A small GPTModel (or, ``cfg.model == "hybrid"``, hybrid model), the same weights on
    every call with the same seed and TP (weights are initialized on the CPU and split, as
    ``use_cpu_initialization`` does), on ``device``. Under PP this rank builds its stage
    only (``cfg.layers // cfg.pp`` layers)."""
    if cfg.model == "hybrid":
        return build_hybrid_model(cfg, seed, device, **config_overrides)
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    seed_model_parallel(seed, device)
    config = transformer_config(cfg, **config_overrides)
    spec = spec or layer_spec()
    pre_process, post_process = _stage(cfg)
    block = TransformerBlockSubmodules(layer_specs=[spec] * (cfg.layers // cfg.pp),
                                       layer_norm=SequenceParallelSafeNorm)
    kwargs = {}
    if cfg.mtp_layers:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

        kwargs["mtp_block_spec"] = get_gpt_mtp_block_spec(config, spec,
                                                          use_transformer_engine=False)
    model = GPTModel(
        config=config, transformer_layer_spec=block, vocab_size=cfg.vocab,
        max_sequence_length=cfg.max_positions or cfg.seq, pre_process=pre_process,
        post_process=post_process, share_embeddings_and_output_weights=cfg.tied,
        position_embedding_type=cfg.position_embedding, rotary_base=cfg.rotary_base,
        parallel_output=True, **kwargs,
    )
    return _finish(model, cfg, device)


def _finish(model, cfg: ModelConfig, device: str):
    if cfg.dtype != torch.float32:
        model = model.to(cfg.dtype)  # what Float16Module does: torch norms start in fp32
    return model.to(device)


def hybrid_model_class():
    """megatron's hybrid model class: HybridModel (0.18+; MambaModel is its alias there),
    else MambaModel."""
    try:
        from megatron.core.models.hybrid.hybrid_model import HybridModel
        return HybridModel
    except ImportError:
        from megatron.core.models.mamba.mamba_model import MambaModel
        return MambaModel


def _hybrid_stack_module():
    """The module holding the hybrid stack, its final norm swapped for a torch one."""
    import importlib
    import sys
    import types

    try:
        importlib.import_module("megatron.core.extensions.transformer_engine")
    except ImportError:  # 0.12: it imports transformer_engine unconditionally
        stand_in = types.ModuleType("megatron.core.extensions.transformer_engine")
        stand_in.TENorm = SequenceParallelSafeNorm
        sys.modules[stand_in.__name__] = stand_in
    try:
        stack = importlib.import_module("megatron.core.models.hybrid.hybrid_block")
    except ImportError:
        stack = importlib.import_module("megatron.core.ssm.mamba_block")
    stack.TENorm = SequenceParallelSafeNorm
    return stack


def hybrid_layer_symbols() -> set[str]:
    """The layer-pattern characters this core's hybrid model knows ("/" for MTP: 0.17+)."""
    try:
        from megatron.core.models.hybrid.hybrid_layer_allocation import Symbols
    except ImportError:
        from megatron.core.ssm.mamba_hybrid_layer_allocation import Symbols
    return {value for name, value in vars(Symbols).items()
            if name.isupper() and isinstance(value, str)}


def hybrid_pattern(cfg: ModelConfig) -> str:
    """One attention and one MLP layer per GPT layer (the last MLP an MoE with cfg.moe),
    then the MTP layers after "/" (0.17+)."""
    main = "*-" * cfg.layers
    if cfg.moe:
        main = main[:-1] + "E"
    return main + "/*-" * cfg.mtp_layers


def hybrid_stack_spec(cfg: ModelConfig, config):
    """The hybrid stack spec: attention, MLP and MoE layers from the local GPT spec."""
    from megatron.core.ssm.mlp_layer import MLPLayer
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import (
        TransformerLayer,
        TransformerLayerSubmodules,
    )

    stack = _hybrid_stack_module()
    submodules_cls = getattr(stack, "HybridStackSubmodules", None) or stack.MambaStackSubmodules
    stack_cls = getattr(stack, "HybridStack", None) or stack.MambaStack
    gpt = layer_spec().submodules
    layers = dict(
        attention_layer=ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
            input_layernorm=SequenceParallelSafeNorm, self_attention=gpt.self_attention,
            self_attn_bda=gpt.self_attn_bda)),
        mlp_layer=ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=SequenceParallelSafeNorm, mlp=gpt.mlp, mlp_bda=gpt.mlp_bda)),
    )
    if cfg.moe:
        moe = layer_spec(num_experts=config.num_moe_experts).submodules
        layers["moe_layer"] = ModuleSpec(module=TransformerLayer, submodules=(
            TransformerLayerSubmodules(pre_mlp_layernorm=SequenceParallelSafeNorm,
                                       mlp=moe.mlp, mlp_bda=moe.mlp_bda)))
    if cfg.mtp_layers:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec
        from megatron.core.transformer.multi_token_prediction import MultiTokenPredictionBlock

        mtp = get_gpt_mtp_block_spec(config, layer_spec(), use_transformer_engine=False)
        if not isinstance(mtp, ModuleSpec):  # some releases return the submodules alone
            mtp = ModuleSpec(module=MultiTokenPredictionBlock, submodules=mtp)
        for layer in mtp.submodules.layer_specs:
            layer.submodules.mtp_model_layer = None  # built from the pattern after "/"
            for norm in ("enorm", "hnorm", "layer_norm"):
                setattr(layer.submodules, norm, SequenceParallelSafeNorm)
        layers["mtp_block_spec"] = mtp
    return ModuleSpec(module=stack_cls, submodules=submodules_cls(**layers))


def build_hybrid_model(cfg: ModelConfig, seed: int = 1234, device: str = "cpu",
                       **config_overrides):
    """A small hybrid model (see the module docstring), built like :func:`build_model`."""
    import inspect

    seed_model_parallel(seed, device)
    if cfg.moe:
        # no linear biases (megatron's MoE takes them only without expert TP); the
        # allgather dispatcher (alltoall's creates a CUDA stream)
        config_overrides = dict(num_moe_experts=4, moe_router_topk=2, add_bias_linear=False,
                                moe_token_dispatcher_type="allgather", **config_overrides)
    config = transformer_config(replace(cfg, layers=2 * cfg.layers), **config_overrides)
    pattern = hybrid_pattern(cfg)
    model_cls = hybrid_model_class()
    params = inspect.signature(model_cls.__init__).parameters
    spec_kw = "hybrid_stack_spec" if "hybrid_stack_spec" in params else "mamba_stack_spec"
    pattern_kw = ("hybrid_layer_pattern" if "hybrid_layer_pattern" in params
                  else "hybrid_override_pattern")
    pre_process, post_process = _stage(cfg)
    model = model_cls(
        config=config, vocab_size=cfg.vocab, max_sequence_length=cfg.seq,
        pre_process=pre_process, post_process=post_process,
        share_embeddings_and_output_weights=cfg.tied, parallel_output=True,
        # the class's default and Nemotron-H's: no position embedding (0.12-0.15's forward
        # also calls RotaryEmbedding.get_rotary_seq_len without an argument it requires)
        position_embedding_type="none",
        **{spec_kw: hybrid_stack_spec(cfg, config), pattern_kw: pattern},
    )
    return _finish(model, cfg, device)


def logits_path_logprob(*, hidden_states, output_layer, output_weight, labels, context,
                        scale_logits, **_):
    """The reference processor: the default logits through the output layer, the vocab
    shards gathered, ``log_softmax(logits / T)`` in fp32 at the labels, and the entropy."""
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    logits, _ = output_layer(hidden_states, weight=output_weight, runtime_gather_output=False)
    logits = gather_from_tensor_model_parallel_region(scale_logits(logits))  # [s, b, v]
    picked, entropy = logprob_entropy(logits, labels.transpose(0, 1), context["temperature"])
    return {"log_probs": picked.transpose(0, 1), "entropy": entropy.transpose(0, 1)}


def logprob_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float):
    """The logits path's reference: ``log_softmax(logits / T)`` in fp32 at ``labels``, and
    the entropy; ``logits`` [..., V], ``labels`` [...]."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def batch(cfg: ModelConfig, seed: int = 99, device: str = "cpu"):
    """input_ids, position_ids, attention_mask (True = masked), labels, loss_mask."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    labels = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    position_ids = torch.arange(cfg.seq).unsqueeze(0).expand(cfg.batch, -1)
    mask = torch.triu(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool), 1)[None, None]
    loss_mask = torch.ones(cfg.batch, cfg.seq)
    return tuple(t.to(device) for t in (input_ids, position_ids, mask, labels, loss_mask))


def finalize_grads(model) -> None:
    """All-reduce SP-marked grads over TP, as megatron's finalize_model_grads does."""
    from megatron.core import parallel_state

    if parallel_state.get_tensor_model_parallel_world_size() == 1:
        return
    group = parallel_state.get_tensor_model_parallel_group()
    for param in model.parameters():
        if getattr(param, "sequence_parallel", False) and param.grad is not None:
            dist.all_reduce(param.grad, group=group)


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()
            if p.grad is not None}


def gathered_grads(model) -> dict[str, torch.Tensor]:
    """Every parameter's gradient in fp32 on the CPU, TP shards gathered along their
    partition dim."""
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    world = dist.get_world_size(group)
    out = {}
    for name, param in model.named_parameters():
        grad = param.grad.detach().float()
        if world > 1 and getattr(param, "tensor_model_parallel", False):
            parts = [torch.empty_like(grad) for _ in range(world)]
            dist.all_gather(parts, grad.contiguous(), group=group)
            grad = torch.cat(parts, dim=param.partition_dim)
        out[name] = grad.cpu()
    return out
