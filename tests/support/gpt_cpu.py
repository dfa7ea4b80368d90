"""Run megatron-core's real GPTModel on CPU with gloo (test-only shims, never shipped);
also used on GPUs by tools/tp_check.py.

What megatron needs on a machine without a GPU (see ../shared/notes/megatron-on-cpu.md):
``torch.cuda.current_device()`` must answer "cpu"; the RNG tracker must be the inference
one (its add/fork do nothing); the torch norm must be built without sequence parallel and
its parameters marked, and its grads then all-reduced over TP as finalize_model_grads does;
the causal mask is passed explicitly.
"""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import dataclass

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

    @property
    def name(self) -> str:
        return (f"tp{self.tp}-sp{int(self.sp)}-{'tied' if self.tied else 'untied'}"
                + (f"-mtp{self.mtp_layers}" if self.mtp_layers else "")
                + ("-mup" if self.mup else ""))


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def apply_cpu_shims() -> None:
    torch.cuda.current_device = lambda: "cpu"  # megatron allocates on current_device()


def init_distributed(rank: int, world_size: int, port: int, tp: int,
                     device: str = "cpu") -> None:
    """gloo on CPU (with the CPU shims); NCCL, one GPU per rank, on CUDA."""
    from megatron.core import parallel_state

    if device == "cpu":
        apply_cpu_shims()
        torch.set_num_threads(1)  # bit-exact repeatability across runs
    else:
        torch.cuda.set_device(rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo" if device == "cpu" else "nccl", rank=rank,
                            world_size=world_size)
    parallel_state.initialize_model_parallel(tp, 1)


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


def _layer_spec():
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec()
    spec.submodules.input_layernorm = SequenceParallelSafeNorm
    spec.submodules.pre_mlp_layernorm = SequenceParallelSafeNorm
    return spec


def transformer_config(cfg: ModelConfig):
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(
        num_layers=cfg.layers, hidden_size=cfg.hidden, num_attention_heads=cfg.heads,
        use_cpu_initialization=True, tensor_model_parallel_size=cfg.tp,
        sequence_parallel=cfg.sp, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=cfg.dtype, bf16=cfg.dtype == torch.bfloat16,
        pipeline_dtype=cfg.dtype,
    )
    if cfg.mup:  # MuP: logits scaled by mup_output_mult = 1 / width_mult = 1/4 here
        kwargs.update(use_mup=True, mup_base_hidden_size=cfg.hidden // 4)
    if cfg.mtp_layers:
        kwargs.update(mtp_num_layers=cfg.mtp_layers, mtp_loss_scaling_factor=0.1)
    return TransformerConfig(**kwargs)


def build_model(cfg: ModelConfig, seed: int = 1234):
    """A tiny GPTModel with the same weights on every call with the same seed and TP."""
    from megatron.core import tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    torch.manual_seed(seed)
    # model_parallel_cuda_manual_seed needs CUDA; the inference tracker's add/fork do nothing.
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True)
    config = transformer_config(cfg)
    spec = TransformerBlockSubmodules(
        layer_specs=[_layer_spec()] * cfg.layers, layer_norm=SequenceParallelSafeNorm)
    kwargs = {}
    if cfg.mtp_layers:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

        kwargs["mtp_block_spec"] = get_gpt_mtp_block_spec(config, _layer_spec(), use_transformer_engine=False)
    model = GPTModel(
        config=config, transformer_layer_spec=spec, vocab_size=cfg.vocab,
        max_sequence_length=cfg.seq, pre_process=True, post_process=True,
        share_embeddings_and_output_weights=cfg.tied, position_embedding_type="rope",
        parallel_output=True, **kwargs,
    )
    return model


def batch(cfg: ModelConfig, seed: int = 99):
    """input_ids, position_ids, attention_mask (True = masked), labels, loss_mask."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    labels = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    position_ids = torch.arange(cfg.seq).unsqueeze(0).expand(cfg.batch, -1)
    mask = torch.triu(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool), 1)[None, None]
    loss_mask = torch.ones(cfg.batch, cfg.seq)
    return input_ids, position_ids, mask, labels, loss_mask


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
