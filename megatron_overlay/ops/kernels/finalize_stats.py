"""The per-token outputs from the statistics, in one launch: the stage contract's ``finalize``.

stats [S, N, 4] are S shards' statistics in rank order (S = 1 without TP; the forward
stage has merged its vocab splits already). One program owns BLOCK token rows and:

1. folds the S shards in rank order with merge_splits.py's ``fold_parts`` (m = max, s =
   sum s_i e^(m_i - m), t = sum (t_i + s_i (m_i - m)) e^(m_i - m), z[label] = sum z_i), so
   a row's result depends on its own values only (batch invariance);
2. lse = m + log s, and with entropy E[z] = m + t / s and H = log s - t / s;
3. with labels: valid = label != ignore_index, bad = valid and label outside
   [0, vocab_size); log p[label] = z[label] - lse, 0 where not valid, NaN where bad (and
   H = 0 where not valid); one row of the label check's record per program (count,
   smallest and largest bad id, first bad row; ops/label_check.py reduces the rows on the
   host when it reads them);
4. with ``values`` (z at k ids a row: the top-k's, or given ids'): each z - lse, in
   place, NaN in the rows ``nan_rows`` marks.

What used to be two dozen element-wise torch launches and a merge (each costing the host
~10-25 us to enqueue on an H200 host, docs/BENCHMARKS.md) is one Triton launch. Steps 1-3
are ``finalize_rows``, which the top-k's last kernel also runs for its rows where no TP
merge comes between the statistics and finalize (``Finalizing``, ``finalize_outputs``):
one launch less a call.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ._record import I64_MAX, record_buffer, store_record
from .launch import cdiv, launch, next_power_of_2
from .merge_splits import fold_parts

FINALIZE_BLOCK = 256  # token rows per program
VALUES_BLOCK = 16     # columns of ``values`` a step (FINALIZE_BLOCK x 16 fp32 in registers)


@triton.jit
def finalize_rows(stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr, valid_ptr,
                  bad_ptr, rec_ptr, rec_row, rows, keep, N, num_shards, vocab_size,
                  ignore_index, HAS_LABELS: tl.constexpr, WITH_ENTROPY: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Steps 1-3 above for ``rows`` (``keep``: those < N), the label check's record in row
    ``rec_row``; returns their lse. finalize_kernel's body, and what the top-k's last
    kernels (merge_runs.py, merge_topk.py) run for their rows in their own launch."""
    m, sum_s, sum_t, z_label = fold_parts(stats_ptr, rows, keep, N, num_shards, WITH_ENTROPY,
                                          BLOCK)
    log_s = tl.log(sum_s)
    lse = m + log_s
    tl.store(lse_ptr + rows, lse, mask=keep)
    ent = log_s
    if WITH_ENTROPY:
        shifted = sum_t / sum_s  # E[z] - max z
        tl.store(mean_z_ptr + rows, m + shifted, mask=keep)
        ent = log_s - shifted
    if HAS_LABELS:
        labels = tl.load(labels_ptr + rows, mask=keep, other=ignore_index).to(tl.int64)
        valid = labels != ignore_index
        bad = valid & ((labels < 0) | (labels >= vocab_size))
        lp = tl.where(valid, z_label - lse, 0.0)
        tl.store(lp_ptr + rows, tl.where(bad, float("nan"), lp), mask=keep)
        tl.store(valid_ptr + rows, valid.to(tl.int8), mask=keep)
        tl.store(bad_ptr + rows, bad.to(tl.int8), mask=keep)
        ent = tl.where(valid, ent, 0.0)
        big = tl.full([BLOCK], I64_MAX, tl.int64)
        store_record(rec_ptr, rec_row, bad.to(tl.int64), tl.where(bad, labels, big),
                     tl.where(bad, labels, -big), tl.where(bad, rows.to(tl.int64), big))
    if WITH_ENTROPY:
        tl.store(ent_ptr + rows, ent, mask=keep)
    return lse


@triton.jit
def finalize_kernel(stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr, valid_ptr,
                    bad_ptr, rec_ptr, num_shards, vocab_size, ignore_index, values_ptr,
                    nan_rows_ptr, N, K, HAS_LABELS: tl.constexpr, WITH_ENTROPY: tl.constexpr,
                    HAS_VALUES: tl.constexpr, HAS_NAN_ROWS: tl.constexpr,
                    BLOCK: tl.constexpr, KBLOCK: tl.constexpr):
    """``values_ptr`` [N, K] fp32 contiguous (``HAS_VALUES``), ``nan_rows_ptr`` [N] int8
    (``HAS_NAN_ROWS``); unused pointers may be any tensor's."""
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    keep = rows < N
    lse = finalize_rows(stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr,
                        valid_ptr, bad_ptr, rec_ptr, pid, rows, keep, N, num_shards,
                        vocab_size, ignore_index, HAS_LABELS, WITH_ENTROPY, BLOCK)
    if HAS_VALUES:  # log p = z - lse, the same fp32 subtraction as torch's
        if HAS_NAN_ROWS:
            nan_row = tl.load(nan_rows_ptr + rows, mask=keep, other=0) != 0
        for c0 in range(0, K, KBLOCK):
            cols = c0 + tl.arange(0, KBLOCK)
            at = values_ptr + rows[:, None].to(tl.int64) * K + cols[None, :]
            inside = keep[:, None] & (cols[None, :] < K)
            lp_at = tl.load(at, mask=inside, other=0.0) - lse[:, None]
            if HAS_NAN_ROWS:
                lp_at = tl.where(nan_row[:, None], float("nan"), lp_at)
            tl.store(at, lp_at, mask=inside)


class Finalizing(NamedTuple):
    """What a kernel needs to run ``finalize_rows`` for its rows in its own launch (the
    top-k's last kernels, where no TP merge comes between the statistics and finalize):
    the statistics and the rest of finalize's arguments."""
    stats: torch.Tensor           # [S, N, 4] parts (or [N, 4]: one)
    request: tuple                # ops/params.py's FinalizeRequest
    with_entropy: bool


def finalize_outputs(fin: Finalizing | None, n_tokens: int, programs: int,
                     unused: torch.Tensor) -> tuple[tuple | None, list, dict]:
    """(finalize's outputs, the kernel's finalize arguments, their constexprs) for a launch
    of ``programs`` programs (a record row each) over ``n_tokens`` rows, on ``unused``'s
    device; ``fin`` None: no outputs, ``unused`` (any tensor of the launch) for every
    pointer, and FINALIZE=False."""
    if fin is None:
        return None, [unused] * 9 + [1, 0, 0], dict(FINALIZE=False, HAS_LABELS=False,
                                                    WITH_ENTROPY=False)
    labels, vocab_size, ignore_index, record_alloc = fin.request
    outputs, args = _outputs(fin.stats if fin.stats.dim() == 3 else fin.stats[None], labels,
                             vocab_size, ignore_index, fin.with_entropy, record_alloc,
                             n_tokens, programs, unused.device)
    return outputs, args, dict(FINALIZE=True, HAS_LABELS=labels is not None,
                               WITH_ENTROPY=bool(fin.with_entropy))


def _outputs(stats, labels, vocab_size, ignore_index, with_entropy, record_alloc, n_tokens,
             programs, device):
    """(finalize's outputs allocated, the kernel's finalize arguments, finalize_rows' order)."""
    has_labels = labels is not None
    # two allocations instead of four (each costs host time): what the ops save for the
    # backward, apart from what they return (an in-place edit of a returned tensor bumps
    # the version counter of its whole allocation, which autograd checks on saved tensors)
    lse, mean_z = torch.empty(2, n_tokens, dtype=torch.float32, device=device).unbind(0)
    log_probs, entropy = torch.empty(2, n_tokens, dtype=torch.float32, device=device).unbind(0)
    if not with_entropy:
        mean_z = entropy = None
    valid = bad = rec = None
    if not has_labels:
        log_probs = None
        args = [stats.contiguous(), stats, lse, mean_z if with_entropy else lse,
                entropy if with_entropy else lse, lse, lse, lse, lse]
    else:
        flags = torch.empty(2, n_tokens, dtype=torch.int8, device=device)
        valid, bad = flags.view(torch.bool).unbind(0)
        rec = record_buffer(programs, device, record_alloc)  # a row per program
        # labels[i] at labels_ptr + i
        args = [stats.contiguous(), labels.contiguous(), lse, mean_z if with_entropy else lse,
                entropy if with_entropy else lse, log_probs, flags[0], flags[1], rec]
    args += [stats.shape[0], vocab_size, ignore_index]
    return (lse, mean_z, entropy, log_probs, valid, bad, rec), args


def finalize(stats: torch.Tensor, labels: torch.Tensor | None, vocab_size: int,
             ignore_index: int, with_entropy: bool, *, record_alloc=None, values=None,
             nan_rows=None):
    """The contract's finalize (ops/stages.py): (lse, mean_z, entropy, log_probs, valid,
    bad, record); the last four None without labels, mean_z and entropy None without
    entropy. ``record``: [cdiv(N, FINALIZE_BLOCK), 4] int64, a row per program, in
    ``record_alloc(rows, device)`` when given. ``values`` (z at k ids a row) made
    log-probs in place by the kernel: a contiguous fp32 [N, k] tensor (as every op's is:
    the top-k's and logits_at's outputs, or a gather's)."""
    n_tokens = stats.shape[1]
    has_values = values is not None
    if has_values and not (values.dtype == torch.float32 and values.dim() == 2
                           and values.is_contiguous()):
        raise ValueError(f"values must be a contiguous float32 [N, k] tensor (the kernel "
                         f"writes it in place), got {values.dtype} of shape "
                         f"{tuple(values.shape)} and strides {values.stride()}")
    programs = cdiv(n_tokens, FINALIZE_BLOCK)
    outputs, args = _outputs(stats, labels, vocab_size, ignore_index, with_entropy,
                             record_alloc, n_tokens, programs, stats.device)
    if n_tokens == 0:
        return outputs
    lse = outputs[0]
    launch(finalize_kernel, (programs,), *args,
        values if has_values else lse,
        nan_rows.view(torch.int8) if has_values and nan_rows is not None else lse,
        n_tokens, values.shape[1] if has_values else 0, HAS_LABELS=labels is not None,
        WITH_ENTROPY=with_entropy, HAS_VALUES=has_values,
        HAS_NAN_ROWS=has_values and nan_rows is not None, BLOCK=FINALIZE_BLOCK,
        KBLOCK=min(VALUES_BLOCK, next_power_of_2(values.shape[1])) if has_values else 1)
    return outputs
