"""``megatron-overlay demo``: "fused_logprob" vs materialized logits on a small GPTModel.

Builds megatron-core's own GPTModel (local layer spec, random weights) in one process,
on the GPU when there is one, else on the CPU; runs forward+backward through
``output_processor="fused_logprob"`` and through the logits path
(``log_softmax(logits / T)`` gathered at the labels, plus entropy), and prints both
results' max difference, time and peak memory.
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from .utils.memory import PeakMemory

REPEATS = 3


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="step")
    except ImportError:  # a plain counter when tqdm is absent
        class Plain:
            def __init__(self):
                self.n = 0

            def update(self, k=1):
                self.n += k
                print(f"\r{desc}: {self.n}/{total}", end="", flush=True)

            def close(self):
                print()

        return Plain()


def _init_megatron(device: torch.device) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if not dist.is_initialized():
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


def _build(args, device: torch.device):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(1234)
    config = TransformerConfig(
        num_layers=2, hidden_size=args.hidden, num_attention_heads=4,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=torch.float32)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=args.vocab, max_sequence_length=args.tokens,
                     share_embeddings_and_output_weights=True, parallel_output=True)
    return model.to(device)


def _timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def run_demo(args) -> int:
    from . import require_output_processor

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seq, batch = args.tokens // 2, 2
    bar = _progress(1 + 2 * (1 + REPEATS), f"demo on {device.type}")
    _init_megatron(device)
    model = _build(args, device)
    require_output_processor(model)
    bar.update()

    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, args.vocab, (batch, seq), generator=gen).to(device)
    labels = torch.randint(0, args.vocab, (batch, seq), generator=gen).to(device)
    position_ids = torch.arange(seq, device=device).unsqueeze(0).expand(batch, -1)
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

    results = {}
    # fused first: on CPU the peak RSS only grows, so the smaller peak must come first
    for name, step in (("fused_logprob", fused_step), ("materialized logits", logits_step)):
        model.zero_grad(set_to_none=True)
        step()  # warm-up
        bar.update()
        times = []
        with PeakMemory(device) as peak:
            for _ in range(REPEATS):
                model.zero_grad(set_to_none=True)
                out, seconds = _timed(step, device)
                times.append(seconds)
                bar.update()
        results[name] = (out, statistics.median(times), peak.extra_bytes)
    bar.close()

    (f_lp, f_ent), (r_lp, r_ent) = results["fused_logprob"][0], results["materialized logits"][0]
    print(f"\nGPTModel: 2 layers, hidden {args.hidden}, vocab {args.vocab}, {batch}x{seq} tokens, "
          f"fp32, temperature {temperature}, on {device.type}")
    print(f"{'path':<22}{'fwd+bwd (median)':>18}{'peak extra memory':>20}")
    for name, (_, seconds, extra) in results.items():
        print(f"{name:<22}{seconds * 1e3:>15.1f} ms{extra / 2**20:>17.1f} MiB")
    print(f"max |log_probs diff| = {(f_lp - r_lp).abs().max().item():.3e}")
    print(f"max |entropy diff|   = {(f_ent - r_ent).abs().max().item():.3e}")
    print(f"(the logits tensor alone would be {batch * seq * args.vocab * 4 / 2**20:.0f} MiB "
          f"in fp32)")
    return 0
