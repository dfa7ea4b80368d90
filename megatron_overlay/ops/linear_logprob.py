"""Fused ``log softmax(hidden @ W.T / T)[label]`` and entropy, never materializing the logits.

One autograd Function orchestrates; the stages (per-token statistics, gradients) come from
an implementation picked by device: the chunked torch path (CPU, and the reference) or the
Triton kernels (GPU). Vocab-parallel TP: ``weight`` is this rank's vocab shard, labels are
global ids, and the per-token statistics of all shards are merged with one all-gather.
"""

from __future__ import annotations

import torch

from . import forward_only, label_check
from .first_order import first_order
from .params import LogprobParams
from .stages import pick_impl
from .temperature import inverse_temperature
from .validation import global_vocab, validate_inputs
from .vocab_parallel import complete_grads, gather_stats, shard_labels, shard_layout, tp_world

__all__ = ["LinearLogprobEntropy", "linear_logprob_entropy"]

class LinearLogprobEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, params: LogprobParams, tp_group):
        impl = pick_impl(hidden.device)
        tp, vocab_start, world = shard_layout(weight, tp_group)
        # one copy of strided labels (e.g. ids[:, 0]) for every stage, instead of one each
        labels = labels.contiguous()
        local_labels = shard_labels(labels, vocab_start, weight.shape[0], params.ignore_index)
        inv_t = inverse_temperature(params.temperature, hidden.shape[0], hidden.device,
                                    impl.inverse_temperature_rows)
        # without TP the vocab splits' statistics go to finalize unmerged (one launch less)
        stats = impl.forward_stats(hidden, weight, local_labels, inv_t, params.return_entropy,
                                   logits_dtype=params.logits_dtype, merged=tp)
        if hidden.is_cuda:  # earlier calls' label checks that have finished (no wait); after
            label_check.poll()  # the main launch, so that the GPU starts on it the sooner
        stats = gather_stats(stats, tp_group) if tp else stats
        # One launch on GPU for the outputs and the label check (ops/stages.py): the host
        # time of a call is what a synchronized small-N call waits for.
        # Out-of-range labels (ValueError on CPU and in strict mode, before this) give NaN
        # log-probs and gradients; on CUDA the host raises later (ops/label_check.py).
        vocab = weight.shape[0] * world
        lse, mean_z, entropy, log_probs, valid, bad, record = impl.finalize(
            stats, labels, vocab, params.ignore_index, params.return_entropy,
            record_alloc=label_check.host_record if hidden.is_cuda else None)
        if hidden.is_cuda:
            label_check.defer_record(record, labels, vocab, params.ignore_index,
                                     params.token_batch)

        ctx.params, ctx.tp_group, ctx.tp, ctx.impl = params, tp_group, tp, impl
        ctx.inv_t = inv_t  # a float, or an fp32 [N] tensor (not an autograd input)
        if any(ctx.needs_input_grad[:2]):  # forward-only calls keep nothing alive
            ctx.save_for_backward(hidden, weight, local_labels, lse, mean_z, valid, bad)
        return log_probs, entropy

    @staticmethod
    @first_order  # lse / mean_z are saved as constants: no second-order gradient
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, local_labels, lse, mean_z, valid, bad = ctx.saved_tensors
        # the rows' gradients as they come; the stage zeroes ignored rows' and makes bad
        # rows' NaN (valid / bad)
        g_lp = grad_log_probs.float() if grad_log_probs is not None else torch.zeros_like(lse)
        g_h = None
        if ctx.params.return_entropy and grad_entropy is not None:
            g_h = grad_entropy.float()
        # d_weight (and d_hidden without TP): fp32 accumulation, rounded to the inputs'
        # dtype inside the impl, which saves an fp32 copy and its cast on GPU. Under TP
        # d_hidden stays fp32 for the all-reduce.
        d_hidden, d_weight = ctx.impl.backward(
            hidden, weight, local_labels, ctx.inv_t, lse, mean_z, g_lp, g_h,
            d_weight_dtype=weight.dtype, d_hidden_dtype=None if ctx.tp else hidden.dtype,
            logits_dtype=ctx.params.logits_dtype, need_d_hidden=ctx.needs_input_grad[0],
            need_d_weight=ctx.needs_input_grad[1], valid=valid, bad=bad)
        d_hidden, d_weight = complete_grads(d_hidden, d_weight, hidden, weight,
                                            ctx.tp_group if ctx.tp else None)
        if hidden.is_cuda:
            label_check.poll()
        return d_hidden, d_weight, None, None, None


def linear_logprob_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                           *, temperature=1.0, return_entropy: bool = True,
                           ignore_index: int = -100, tp_group=None,
                           strict_labels: bool | None = None, logits_dtype=None):
    """Per-token log-prob of ``labels`` and entropy under ``softmax(hidden @ weight.T / T)``.

    hidden [N, H], weight [V_local, H] (this rank's vocab shard when ``tp_group`` is given;
    shards in rank order), labels [N] global ids (``ignore_index`` allowed). Returns
    ``(log_probs [N] fp32, entropy [N] fp32 or None)``; ignored tokens get 0 and no
    gradient. The gradient w.r.t. ``hidden`` is complete on every rank.

    Labels outside ``[0, V)`` raise ``ValueError``: at once on CPU or with
    ``strict_labels=True`` (or ``MEGATRON_OVERLAY_STRICT_LABELS=1``); on CUDA otherwise
    without a host sync, at a later point that ops/label_check.py documents (their
    log-probs are NaN meanwhile).

    Precision: the logits are fp32 accumulators, never rounded (an fp32 head, also on 16-bit
    operands); ``logits_dtype=torch.bfloat16`` (or float16) rounds each to that dtype
    before the softmax, reproducing a head in that dtype. ``hidden`` and ``weight`` may be
    of one dtype, or one 16-bit and the other fp32 (an fp32 residual stream or head
    weight); each gradient comes back in its operand's dtype.
    """
    params = LogprobParams.of(temperature=temperature, return_entropy=return_entropy,
                              ignore_index=ignore_index, strict_labels=strict_labels,
                              logits_dtype=logits_dtype)
    world = tp_world(tp_group)
    validate_inputs(hidden, weight, labels, params, vocab_size=global_vocab(weight, world))
    return forward_only.call(LinearLogprobEntropy, hidden, weight, labels, params, tp_group)
