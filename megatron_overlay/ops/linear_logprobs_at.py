"""Fused ``log softmax(hidden @ W.T / T)`` at K given vocab ids per token, no logits.

    log_probs, entropy = linear_logprobs_at(hidden, weight, token_ids, temperature=0.7)

E.g. a teacher's top-k ids: the student's log-probs at them, differentiable w.r.t. hidden
and weight. The log-sum-exp (and entropy) come from the log-prob stage
(``forward_stats`` with no label, torch or Triton by device); the K logits per token from
the stages' ``logits_at_ids`` (sparse; it checks and shards the ids too). Backward:
d/dz sum_i g_i log p(y_i) = sum_i g_i 1[j = y_i] - p_j sum_i g_i, i.e. the log-prob stage's
backward with no label and g = sum_i g_i (the dense part) plus the indicator terms, passed
to it as ``sparse_ids`` / ``sparse_grads``.
Vocab-parallel TP as in linear_logprob.py: ``weight`` is this rank's shard, ids are global.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import forward_only, label_check
from .first_order import first_order
from .params import LogprobParams, check_flag
from .stages import pick_impl
from .temperature import inverse_temperature
from .validation import validate_matrices, validate_token_ids
from .vocab_parallel import complete_grads, gather_stats, shard_layout, tp_world

__all__ = ["LinearLogprobsAt", "backward_at_ids", "linear_logprobs_at"]


def backward_at_ids(impl, hidden, weight, local_ids, inv_t, lse, mean_z, grad_at_ids,
                    grad_entropy, tp_group, needs_input_grad, logits_dtype=None):
    """(d_hidden, d_weight) of sum grad_at_ids * log p(ids) + sum grad_entropy * H.

    Shared by the ops that return log-probs at chosen ids (here and linear_topk.py).
    The log-prob stage's backward runs with no label, g = sum of the row's grads for the
    dense term, and the ids with their grads as its sparse indicator terms. Both
    gradients come out in their operands' dtypes, as linear_logprob_entropy's (one
    rounding of the fp32 accumulation, inside the stage: no fp32 d_hidden and no cast);
    under TP d_hidden stays fp32 for the all-reduce.
    """
    grad_at_ids = grad_at_ids.float()
    d_hidden, d_weight = impl.backward(hidden, weight, None, inv_t, lse,
                                       mean_z if grad_entropy is not None else None,
                                       grad_at_ids.sum(dim=1), grad_entropy,
                                       d_weight_dtype=weight.dtype,
                                       d_hidden_dtype=None if tp_group is not None
                                       else hidden.dtype, sparse_ids=local_ids,
                                       sparse_grads=grad_at_ids, logits_dtype=logits_dtype,
                                       need_d_hidden=needs_input_grad[0],
                                       need_d_weight=needs_input_grad[1])
    return complete_grads(d_hidden, d_weight, hidden, weight, tp_group)


class LinearLogprobsAt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, token_ids, params: LogprobParams, tp_group):
        impl = pick_impl(hidden.device)
        tp, vocab_start, world = shard_layout(weight, tp_group)
        inv_t = inverse_temperature(params.temperature, hidden.shape[0], hidden.device,
                                    impl.inverse_temperature_rows)
        stats = impl.forward_stats(hidden, weight, None, inv_t, params.return_entropy,
                                   logits_dtype=params.logits_dtype, merged=tp)
        if hidden.is_cuda:  # earlier calls' checks that have finished (no wait); after the
            label_check.poll()  # main launch, so that the GPU starts on it the sooner
        # Out-of-range ids (ValueError on CPU and in strict mode, before this): their rows
        # get NaN log-probs and gradients, the ids themselves read nothing (they lie in no
        # vocab shard), and on CUDA the host raises later (ops/label_check.py). One launch
        # on GPU checks, shards, records and gathers z at the ids (the host time of a call
        # is what a small-N call waits for).
        z_at, local_ids, bad_rows, record = impl.logits_at_ids(
            hidden, weight, token_ids, vocab_start, weight.shape[0], weight.shape[0] * world,
            inv_t, logits_dtype=params.logits_dtype,
            record_alloc=label_check.host_record if hidden.is_cuda else None)
        if hidden.is_cuda:
            label_check.defer_ids(record, token_ids, weight.shape[0] * world,
                                  batch=params.token_batch)
        if tp:
            stats = gather_stats(stats, tp_group)
            dist.all_reduce(z_at, group=tp_group)  # each id lives in exactly one shard
        # z at the ids become log-probs in finalize's launch (z - lse, NaN in bad rows)
        lse, mean_z, entropy = impl.finalize(stats, None, 0, 0, params.return_entropy,
                                             values=z_at, nan_rows=bad_rows)[:3]
        log_probs = z_at
        ctx.impl, ctx.inv_t, ctx.tp_group = impl, inv_t, tp_group if tp else None
        ctx.logits_dtype = params.logits_dtype
        if any(ctx.needs_input_grad[:2]):  # forward-only calls keep nothing alive
            ctx.save_for_backward(hidden, weight, local_ids, lse, mean_z, bad_rows)
        return log_probs, entropy

    @staticmethod
    @first_order  # lse / mean_z are saved as constants: no second-order gradient
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, local_ids, lse, mean_z, bad_rows = ctx.saved_tensors
        if grad_log_probs is None:
            grad_log_probs = torch.zeros(local_ids.shape, dtype=torch.float32,
                                         device=hidden.device)
        grad_log_probs = torch.where(bad_rows[:, None], float("nan"), grad_log_probs.float())
        if mean_z is None:
            grad_entropy = None
        d_hidden, d_weight = backward_at_ids(
            ctx.impl, hidden, weight, local_ids, ctx.inv_t, lse, mean_z, grad_log_probs,
            None if grad_entropy is None else grad_entropy.float(), ctx.tp_group,
            ctx.needs_input_grad, ctx.logits_dtype)
        if hidden.is_cuda:
            label_check.poll()
        return d_hidden, d_weight, None, None, None


def linear_logprobs_at(hidden: torch.Tensor, weight: torch.Tensor, token_ids: torch.Tensor,
                       *, temperature=1.0, tp_group=None, return_entropy: bool = False,
                       strict_ids: bool | None = None, logits_dtype=None):
    """``log softmax(hidden @ weight.T / T)`` at ``token_ids``, without the logits.

    hidden [N, H], weight [V_local, H] (this rank's vocab shard when ``tp_group`` is given;
    shards in rank order), token_ids [N, K] global ids in [0, V). ``temperature``: a
    float, a 0-d tensor or an [N] tensor (in [1.2e-38, 2^66]; ops/temperature.py). Returns ``(log_probs [N, K] fp32,
    entropy [N] fp32 or None)``; d_hidden is complete on every rank.

    Ids outside ``[0, V)`` raise ``ValueError``: at once on CPU or with ``strict_ids=True``
    (or ``MEGATRON_OVERLAY_STRICT_LABELS=1``); on CUDA otherwise without a host sync, at a
    later point that ops/label_check.py documents (those rows' log-probs are NaN meanwhile).
    ``logits_dtype`` and the operands' dtypes: as in linear_logprob_entropy.
    """
    params = LogprobParams.of(temperature=temperature, return_entropy=return_entropy,
                              logits_dtype=logits_dtype)
    validate_matrices(hidden, weight)
    world = tp_world(tp_group)
    validate_token_ids(token_ids, hidden.shape[0], weight.shape[0] * world, hidden.device,
                       strict=check_flag(strict_ids, "strict_ids", allow_none=True))
    return forward_only.call(LinearLogprobsAt, hidden, weight, token_ids, params, tp_group)
