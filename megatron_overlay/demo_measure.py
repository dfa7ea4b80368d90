"""What ``megatron-overlay demo`` measures: "fused_logprob" vs materialized logits.

Builds megatron-core's own GPTModel (local layer spec, random weights) in this process,
on the GPU when there is one, else on the CPU, and runs forward+backward through
``output_processor="fused_logprob"`` and through the logits path
(``log_softmax(logits / T)`` gathered at the labels, plus entropy).

Numbers meant to repeat from run to run on a shared machine:
- time: ``warmup`` untimed steps of each path, then ``repeats`` rounds that each time one
  step of both paths back to back (alternating which goes first), so a change in the
  machine's load hits both paths alike; the median and the range are reported.
- memory: one more step of each path under :class:`PeakTensorMemory`, the peak of the
  bytes torch's allocator held above the step's start. It does not depend on what the
  process's malloc kept resident from earlier steps, as the process's RSS does.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass, field

import torch

from .utils.memory import PeakTensorMemory

NUM_LAYERS = 2
NUM_HEADS = 4
BATCH = 2
PATHS = ("fused_logprob", "materialized logits")


@dataclass
class PathResult:
    seconds: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _init_megatron(device: torch.device) -> bool:
    """Megatron's parallel state on a one-rank group; True when this call created the
    process group (then ``_teardown`` destroys it: NCCL warns at exit otherwise)."""
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))  # two demos at once: no clash
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0,
                                world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    if device.type == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    else:
        # Running megatron on a CPU-only machine, in this demo process only (the overlay's
        # library code never does this): megatron allocates scratch buffers on
        # torch.cuda.current_device(), and CUDA RNG states don't exist here, so the
        # inference RNG tracker (whose fork is a no-op) stands in.
        torch.cuda.current_device = lambda: "cpu"
        tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True)
    return created


def _teardown(created_group: bool) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if created_group and dist.is_initialized():
        dist.destroy_process_group()


def _build(args, device: torch.device):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(1234)
    config = TransformerConfig(
        num_layers=NUM_LAYERS, hidden_size=args.hidden, num_attention_heads=NUM_HEADS,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=torch.float32)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=args.vocab, max_sequence_length=args.tokens,
                     share_embeddings_and_output_weights=True, parallel_output=True)
    return model.to(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(args, progress) -> tuple[dict[str, PathResult], torch.device]:
    """Run both paths; ``progress()`` is called once per finished step."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seq = args.tokens // BATCH
    created_group = _init_megatron(device)
    try:
        return _measure(args, progress, device, seq)
    finally:
        _teardown(created_group)


def _measure(args, progress, device: torch.device, seq: int):
    from . import require_output_processor

    model = _build(args, device)
    require_output_processor(model, processor="fused_logprob")  # the fix, before any work
    progress()

    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, args.vocab, (BATCH, seq), generator=gen).to(device)
    labels = torch.randint(0, args.vocab, (BATCH, seq), generator=gen).to(device)
    position_ids = torch.arange(seq, device=device).unsqueeze(0).expand(BATCH, -1)
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=device), 1)[None, None]
    temperature = args.temperature

    def fused_step():
        out = model(input_ids, position_ids, mask, labels=labels,
                    output_processor="fused_logprob",
                    output_processor_context={"temperature": temperature})
        (out.log_probs.mean() + 0.01 * out.entropy.mean()).backward()
        return out.log_probs.detach(), out.entropy.detach()

    def logits_step():
        logits = model(input_ids, position_ids, mask)  # [b, s, v]
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        log_probs = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        (log_probs.mean() + 0.01 * entropy.mean()).backward()
        return log_probs.detach(), entropy.detach()

    steps = dict(zip(PATHS, (fused_step, logits_step)))
    results = {name: PathResult() for name in PATHS}

    def timed(name: str) -> float:
        model.zero_grad(set_to_none=True)
        _sync(device)
        start = time.perf_counter()
        steps[name]()
        _sync(device)
        return time.perf_counter() - start

    for _ in range(args.warmup):
        for name in PATHS:
            timed(name)
            progress()
    for round_index in range(args.repeats):
        for name in PATHS if round_index % 2 == 0 else PATHS[::-1]:
            results[name].seconds.append(timed(name))
            progress()
    for name in PATHS:
        model.zero_grad(set_to_none=True)
        with PeakTensorMemory(device) as peak:
            log_probs, entropy = steps[name]()
        results[name].peak_bytes = peak.extra_bytes
        results[name].log_probs, results[name].entropy = log_probs, entropy
        progress()
    return results, device


def median_ms(result: PathResult) -> float:
    return statistics.median(result.seconds) * 1e3
