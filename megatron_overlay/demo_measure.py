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
import statistics
import time
from dataclasses import dataclass, field

import torch

from . import model_builder
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


def _config(args) -> model_builder.ModelConfig:
    """The demo's GPTModel: local spec, learned absolute positions, tied embeddings."""
    return model_builder.ModelConfig(
        vocab=args.vocab, hidden=args.hidden, layers=NUM_LAYERS, heads=NUM_HEADS,
        seq=args.tokens // BATCH, batch=BATCH, position_embedding="learned_absolute",
        max_positions=args.tokens)


def _init_megatron(device: torch.device) -> bool:
    """Megatron's parallel state on a one-rank group; True when this call created the
    process group (then ``_teardown`` destroys it: NCCL warns at exit otherwise)."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # two demos at once: no clash
    os.environ.setdefault("MASTER_PORT", str(model_builder.free_port()))
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0,
                                world_size=1)
    if device.type != "cuda":
        model_builder.apply_cpu_shims()  # megatron on a CPU-only machine, in this process
    model_builder.init_model_parallel(1)
    return created


def _teardown(created_group: bool) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if created_group and dist.is_initialized():
        dist.destroy_process_group()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(args, progress) -> tuple[dict[str, PathResult], torch.device]:
    """Run both paths; ``progress()`` is called once per finished step."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    created_group = _init_megatron(device)
    try:
        return _measure(args, progress, device)
    finally:
        _teardown(created_group)


def _measure(args, progress, device: torch.device):
    from . import require_output_processor

    cfg = _config(args)
    model = model_builder.build_model(cfg, seed=1234, device=device.type)
    require_output_processor(model, processor="fused_logprob")  # the fix, before any work
    progress()

    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg, seed=0,
                                                                   device=device.type)
    temperature = args.temperature

    def fused_step():
        out = model(input_ids, position_ids, mask, labels=labels,
                    output_processor="fused_logprob",
                    output_processor_context={"temperature": temperature})
        (out.log_probs.mean() + 0.01 * out.entropy.mean()).backward()
        return out.log_probs.detach(), out.entropy.detach()

    def logits_step():
        logits = model(input_ids, position_ids, mask)  # [b, s, v]
        log_probs, entropy = model_builder.logprob_entropy(logits, labels, temperature)
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
