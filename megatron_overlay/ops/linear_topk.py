"""Fused top-k of ``log softmax(hidden @ W.T / T)`` per token, no logits.

    out = linear_topk_logprobs(hidden, weight, k=8, temperature=0.7)
    out.topk_ids          # [N, k] int64 global vocab ids, descending log-prob, ties to lower id
    out.topk_log_probs    # [N, k] fp32, differentiable (the log-probs at those fixed ids)

One pass over the logits tiles feeds both the online log-sum-exp and a running top-k
(stage: ``topk_stats``, ops/torch_topk.py on CPU, ops/kernels/triton_topk.py on GPU when
present). With ``labels`` the same pass also gives the labels' log-probs (and entropy), as
``linear_logprob_entropy`` would. Vocab-parallel TP: each shard's top-k and statistics are
gathered and merged (ids global). The gradient is that of the log-probs at the chosen ids
(the choice itself is piecewise constant): linear_logprobs_at.backward_at_ids.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import torch
import torch.distributed as dist

from . import forward_only, label_check
from .first_order import first_order
from .linear_logprobs_at import backward_at_ids
from .params import FinalizeRequest, LogprobParams
from .stages import pick_topk_impl
from .temperature import inverse_temperature
from .topk_merge import PAD_ID, order_candidates
from .validation import global_vocab, validate_inputs, validate_matrices
from .vocab_parallel import gather_stats, shard_ids, shard_labels, shard_layout, tp_world

MAX_K = 256


class TopkLogprobs(NamedTuple):
    topk_ids: torch.Tensor                 # [N, k] int64
    topk_log_probs: torch.Tensor           # [N, k] fp32
    log_probs: torch.Tensor | None = None  # [N] fp32 at the labels (with labels)
    entropy: torch.Tensor | None = None    # [N] fp32 (return_entropy)


# A shard's unfilled places (PAD_ID) travel as this id, exact in fp64 and above any vocab id
_PAD_IN_FP64 = 2 ** 53


def _merge_shards(values: torch.Tensor, ids: torch.Tensor, k: int, tp_group):
    """Every shard's [N, k] top-k -> the global one, with one all-gather (values and ids
    packed as fp64: fp32 values and ids < 2^53 are exact there; PAD_ID as 2^53, which
    fp64 -> int64 would otherwise turn into -2^63, an id below every other)."""
    world = dist.get_world_size(tp_group)
    packed = torch.cat([values.double(), ids.clamp(max=_PAD_IN_FP64).double()], dim=1)
    flat = torch.empty((world * packed.shape[0], packed.shape[1]), dtype=packed.dtype,
                       device=packed.device)
    dist.all_gather_into_tensor(flat, packed.contiguous(), group=tp_group)
    gathered = flat.view(world, values.shape[0], 2 * k).permute(1, 0, 2)  # [N, world, 2k]
    all_values = gathered[..., :k].reshape(values.shape[0], world * k).float()
    all_ids = gathered[..., k:].reshape(values.shape[0], world * k).long()
    values, ids = order_candidates(all_values, all_ids, k)
    return values, torch.where(ids == _PAD_IN_FP64, PAD_ID, ids)


class LinearTopkLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, k: int, params: LogprobParams, tp_group):
        topk_impl, impl = pick_topk_impl(hidden.device)
        tp, vocab_start, world = shard_layout(weight, tp_group)
        n = hidden.shape[0]
        vocab = weight.shape[0] * world
        if labels is not None:
            labels = labels.contiguous()  # one copy of strided labels for every stage
            local_labels = shard_labels(labels, vocab_start, weight.shape[0],
                                        params.ignore_index)
        else:
            local_labels = None
        inv_t = inverse_temperature(params.temperature, n, hidden.device,
                                    impl.inverse_temperature_rows)
        # as linear_logprob_entropy: out-of-range labels give NaN log-probs; on CUDA the
        # host raises later, without a sync (ops/label_check.py)
        record_alloc = label_check.host_record if hidden.is_cuda else None
        # without TP the stage finalizes too (on GPU in its last kernel's launch): finalize's
        # outputs, and the top-k's z come back as log-probs; with TP the shard's statistics
        per_token, values, ids = topk_impl.topk_stats(
            hidden, weight, local_labels, inv_t, params.return_entropy, k,
            logits_dtype=params.logits_dtype, merged=tp,
            finalize=None if tp else FinalizeRequest(labels, vocab, params.ignore_index,
                                                     record_alloc))
        if tp:
            if vocab_start:
                ids = torch.where(ids == PAD_ID, ids, ids + vocab_start)
            values, ids = _merge_shards(values, ids, k, tp_group)
            # the top-k's z become log-probs in finalize's launch (z - lse, in place)
            per_token = impl.finalize(gather_stats(per_token, tp_group), labels, vocab,
                                      params.ignore_index, params.return_entropy,
                                      record_alloc=record_alloc, values=values)
        lse, mean_z, entropy, log_probs, valid, bad, record = per_token
        if hidden.is_cuda:
            try:  # earlier calls' checks that have finished (no wait); after the launches,
                label_check.poll()  # so that the GPU starts on them the sooner
            finally:  # this call's record queued (lent since finalize), even where an
                if labels is not None:  # earlier call's bad labels raise
                    label_check.defer_record(record, labels, vocab, params.ignore_index,
                                             params.token_batch)
        topk_log_probs = values
        ctx.mark_non_differentiable(ids)
        ctx.impl, ctx.inv_t, ctx.tp_group = impl, inv_t, tp_group if tp else None
        ctx.has_labels, ctx.logits_dtype = labels is not None, params.logits_dtype
        if any(ctx.needs_input_grad[:2]):  # forward-only calls keep nothing alive
            # the chosen ids (and the label): the ids whose log-probs carry gradients. Without
            # TP the global ids are this shard's (PAD_ID lies in no shard: no id); a copy,
            # since the caller may edit the returned ids in place.
            local_ids = shard_ids(ids, vocab_start, weight.shape[0]) if tp else ids
            local_ids = local_ids.clone() if local_labels is None else \
                torch.cat([local_ids, local_labels[:, None]], dim=1)
            ctx.save_for_backward(hidden, weight, local_ids, lse, mean_z, valid, bad)
        return ids, topk_log_probs, log_probs, entropy

    @staticmethod
    @first_order  # lse / mean_z are saved as constants: no second-order gradient
    def backward(ctx, _grad_ids, grad_topk, grad_log_probs, grad_entropy):
        hidden, weight, local_ids, lse, mean_z, valid, bad = ctx.saved_tensors
        n, k = hidden.shape[0], local_ids.shape[1] - ctx.has_labels
        if not ctx.has_labels and grad_topk is not None:  # the ids' grads, nothing else
            grads = grad_topk.float()
        else:
            grads = torch.zeros(n, local_ids.shape[1], dtype=torch.float32,
                                device=hidden.device)
            if grad_topk is not None:
                grads[:, :k] = grad_topk.float()
        if grad_log_probs is not None and ctx.has_labels:
            grads[:, k] = torch.where(valid, grad_log_probs.float(), 0.0)
            grads[:, k] = torch.where(bad, float("nan"), grads[:, k])
        g_ent = None
        if grad_entropy is not None and mean_z is not None:
            g_ent = grad_entropy.float()
            if valid is not None:
                g_ent = torch.where(valid, g_ent, 0.0)
        d_hidden, d_weight = backward_at_ids(ctx.impl, hidden, weight, local_ids, ctx.inv_t,
                                             lse, mean_z, grads, g_ent, ctx.tp_group,
                                             ctx.needs_input_grad, ctx.logits_dtype)
        if hidden.is_cuda:
            label_check.poll()
        return d_hidden, d_weight, None, None, None, None


def validate_k(k, vocab_size: int) -> int:
    """``k`` as a Python int (numpy's integers from a config too: a kernel's constexpr and
    the launch cache key take an int) after the range check."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int (1 <= k <= {min(MAX_K, vocab_size)}), got "
                        f"{type(k).__name__}")
    k = int(k)
    if not 1 <= k <= min(MAX_K, vocab_size):
        raise ValueError(f"k must satisfy 1 <= k <= {MAX_K} and k <= vocab size "
                         f"({vocab_size}), got k={k}")
    return k


def linear_topk_logprobs(hidden: torch.Tensor, weight: torch.Tensor, k: int, *,
                         temperature=1.0, tp_group=None, labels: torch.Tensor | None = None,
                         return_entropy: bool = False, ignore_index: int = -100,
                         strict_labels: bool | None = None, logits_dtype=None) -> TopkLogprobs:
    """The ``k`` most likely ids under ``softmax(hidden @ weight.T / T)`` and their log-probs.

    hidden [N, H], weight [V_local, H] (this rank's vocab shard when ``tp_group`` is given;
    shards in rank order). ``temperature``: a float, a 0-d tensor or an [N] tensor (in
    [1.2e-38, 2^66]; ops/temperature.py). ``labels`` [N] (optional, ``ignore_index`` allowed) adds ``log_probs`` at them;
    ``return_entropy`` adds the entropy (0 at ignored labels); out-of-range labels raise
    ValueError as in ``linear_logprob_entropy`` (on CUDA later, without a sync). Returns a
    TopkLogprobs; all
    log-probs are differentiable w.r.t. hidden and weight, d_hidden complete on every rank.
    ``logits_dtype`` and the operands' dtypes: as in linear_logprob_entropy (with a
    16-bit ``logits_dtype`` ties between rounded logits go to the lower id).
    """
    params = LogprobParams.of(temperature=temperature, return_entropy=return_entropy,
                              ignore_index=ignore_index, strict_labels=strict_labels,
                              logits_dtype=logits_dtype)
    world = tp_world(tp_group)
    vocab = global_vocab(weight, world)
    if labels is not None:
        validate_inputs(hidden, weight, labels, params, vocab_size=vocab)
    else:
        validate_matrices(hidden, weight)
    k = validate_k(k, vocab)
    return TopkLogprobs(*forward_only.call(LinearTopkLogprobs, hidden, weight, labels, k, params,
                                           tp_group))
