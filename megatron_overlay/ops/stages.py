"""The stage contract: what the fused ops need from an implementation, and its choice.

Two implementations, picked by device (``pick_impl`` / ``pick_topk_impl``):
  chunked torch (CPU, and the reference)   ops/torch_chunked.py, ops/torch_topk.py
  Triton kernels (GPU)                     ops/kernels/triton_impl.py, kernels/triton_topk.py
Each is a module whose functions satisfy the Protocols below (a module satisfies a
Protocol structurally: PEP 544, "modules as implementations of protocols"); they may take
extra keyword-only arguments with defaults, for tools and tests (tile sizes, kernel
configs), which the ops never pass. tests/ops/test_stages.py checks the signatures.

Shared by every stage:
  inv_temperature: a Python float (one temperature for every row) or an fp32 [N] tensor
      on the hidden states' device (row i scaled by inv_temperature[i]; NaN for a row
      whose temperature was invalid, see ops/temperature.py).
  local_labels [N] / local_ids [N, K]: indices into this vocab shard (weight [V, H] is
      this rank's shard); a value outside [0, V) (-1, another shard's id less this
      shard's start, an out-of-range label) matches no column: no label / id here. The
      forward stages and backward also take ``local_labels=None``: no label in any row
      (z[label] = 0), which spares the kernels the label's compare (and sum) over every
      logit.
  z = round(hidden @ weight.T) * inv_temperature (per row), accumulated in fp32 from
      operands of one dtype or a 16-bit one with an fp32 one; round is the identity by
      default (an fp32 head) and, with the keyword ``logits_dtype`` (bfloat16 or float16),
      rounds each logit to that dtype once, as a head in it does (its gradient passes
      through unchanged). Both implementations take every mode (the Triton kernels:
      ops/kernels/_tiles.py's ``dot_nt`` and ``round_logits``).
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from . import torch_chunked, torch_topk
from .env_flags import env_value
from .params import FinalizeRequest

InvTemperature = float | torch.Tensor
# record_alloc(rows, device) -> int64 [rows, 4]: where a stage puts its label-check record
# (ops/label_check.py's host_record: pinned host memory the kernels write directly, so
# the record needs no copy and no allocation of torch's pinned allocator); None: the
# stage's own device tensor.
RecordAlloc = Callable[[int, torch.device], torch.Tensor]

IMPL_ENV = "MEGATRON_OVERLAY_IMPL"  # "torch" or "triton"; default: triton on CUDA


class LogprobStages(Protocol):
    """The log-prob / entropy stages (ops/linear_logprob.py, ops/linear_logprobs_at.py)."""

    def forward_stats(self, hidden: torch.Tensor, weight: torch.Tensor,
                      local_labels: torch.Tensor | None, inv_temperature: InvTemperature,
                      with_entropy: bool, *, logits_dtype: torch.dtype | None = None,
                      merged: bool = True) -> torch.Tensor:
        """[N, 4] fp32 per-token statistics of z over this shard: (m = max z,
        s = sum exp(z - m), t = sum exp(z - m) * (z - m), z[label] or 0). t is taken
        relative to the max so that entropy = log s - t / s has no cancellation between
        two large numbers (lse and E[z]) at low temperatures.

        ``merged=False`` (no TP: nothing but ``finalize`` reads them): [S, N, 4], the
        statistics of S >= 1 consecutive vocab parts of this shard in order, unmerged;
        ``finalize`` folds them as it folds shards, which gives the outputs of the merged
        statistics bit for bit (folding one part is exact), and the merge's launch is
        spared."""
        ...

    def finalize(self, stats: torch.Tensor, labels: torch.Tensor | None, vocab_size: int,
                 ignore_index: int, with_entropy: bool, *,
                 record_alloc: RecordAlloc | None = None, values: torch.Tensor | None = None,
                 nan_rows: torch.Tensor | None = None) -> tuple:
        """The per-token outputs of [S, N, 4] statistics of S vocab shards in rank order
        (S = 1 without TP, or the parts of ``forward_stats(merged=False)``; folded as
        forward_stats merges its splits, in order):
        ``(lse, mean_z, entropy, log_probs, valid, bad, record)``, [N] fp32 but for
        ``valid`` / ``bad`` ([N] bool) and ``record`` (int64 [rows, 4]: the label check's,
        ops/label_check.py). mean_z = E_p[z] and the entropy: None without
        ``with_entropy``. ``labels`` [N] global ids (None: the last four are None):
        valid = label != ignore_index, bad = valid and outside [0, vocab_size); log_probs
        z[label] - lse, 0 where not valid, NaN where bad; the entropy 0 where not valid.
        ``record_alloc``: where the record goes (see RecordAlloc). ``values`` [N, k] fp32
        (contiguous for the Triton stage, which writes it in its kernel),
        z at k ids a row (the top-k's, or given ids'): made log-probs in place, z - lse,
        NaN in the rows where ``nan_rows`` [N] bool (optional) is True; the ops' one
        launch for every per-token output on GPU, where a subtraction and a fill were two
        more."""
        ...

    def backward(self, hidden: torch.Tensor, weight: torch.Tensor,
                 local_labels: torch.Tensor | None,
                 inv_temperature: InvTemperature, lse: torch.Tensor,
                 mean_z: torch.Tensor | None, grad_logprob: torch.Tensor,
                 grad_entropy: torch.Tensor | None, *,
                 d_weight_dtype: torch.dtype | None = None,
                 d_hidden_dtype: torch.dtype | None = None,
                 sparse_ids: torch.Tensor | None = None,
                 sparse_grads: torch.Tensor | None = None,
                 logits_dtype: torch.dtype | None = None,
                 need_d_hidden: bool = True, need_d_weight: bool = True,
                 valid: torch.Tensor | None = None, bad: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(d_hidden [N, H] partial over this shard, d_weight [V, H]) of
        sum grad_logprob * log p[label] + sum grad_entropy * H (lse, mean_z = E_p[z]
        [N]: from the merged statistics; mean_z and grad_entropy None without entropy),
        each accumulated in fp32 and rounded once to its dtype argument, default fp32.
        grad_logprob, grad_entropy and sparse_grads at any strides (a loss's ``sum()``
        hands them expanded, stride 0; the Triton stage reads them so, without a copy).
        ``sparse_ids`` [N, K] (local ids, or -1) with ``sparse_grads`` [N, K] fp32 add
        sum_i sparse_grads[n, i] 1[j = sparse_ids[n, i]] to d(loss)/dz, the indicator
        terms of log-probs at several ids per token (repeats add up); used by
        linear_logprobs_at / linear_topk_logprobs with local_labels None.
        ``need_d_hidden`` / ``need_d_weight`` False: that gradient is None, its GEMM not
        run (a frozen head or input: a third of the backward's work each). ``valid`` /
        ``bad`` [N] bool (finalize's, both or neither): grad_logprob is taken as 0 where not
        valid and NaN where bad, grad_entropy as 0 where not valid (on GPU inside the
        recompute kernel, where three torch launches did it)."""
        ...

    def inverse_temperature_rows(self, temperature: torch.Tensor) -> torch.Tensor:
        """fp32 [N] 1 / T of a floating [N] tensor of per-row temperatures (any stride) on
        the hidden states' device: NaN where T, in fp32, is NaN or outside
        [temperature.MIN_TEMPERATURE, temperature.MAX_TEMPERATURE] (ops/temperature.py's
        ``inverse_rows``, bit for bit)."""
        ...

    def check_ids(self, ids: torch.Tensor, vocab_start: int, local_vocab: int,
                  vocab_size: int, *, record_alloc: RecordAlloc | None = None,
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Global vocab ids [N, K] (linear_logprobs_at's) checked and sharded:
        ``(local_ids, bad_rows, record)``: local_ids [N, K] int64, id - vocab_start where
        that lies in [0, local_vocab), else -1 (another shard's id, and an id outside
        [0, vocab_size), which lies in no shard); bad_rows [N] bool, the rows with an id
        outside [0, vocab_size); record int64 [rows, 4], the label check's of those ids
        (ops/label_check.py; positions in the flattened ids), in ``record_alloc``'s buffer
        where given."""
        ...

    def logits_at(self, hidden: torch.Tensor, weight: torch.Tensor, local_ids: torch.Tensor,
                  inv_temperature: InvTemperature, *,
                  logits_dtype: torch.dtype | None = None) -> torch.Tensor:
        """z [N, K] fp32 at ``local_ids`` [N, K], and 0 where the id is -1. (Its gradient
        is backward's ``sparse_ids`` term.)"""
        ...

    def logits_at_ids(self, hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor,
                      vocab_start: int, local_vocab: int, vocab_size: int,
                      inv_temperature: InvTemperature, *,
                      logits_dtype: torch.dtype | None = None,
                      record_alloc: RecordAlloc | None = None) -> tuple:
        """``check_ids`` of the global ``ids`` [N, K], then ``logits_at`` at its local ids:
        ``(z [N, K], local_ids, bad_rows, record)``, each as those two give it (the Triton
        stage: in one launch)."""
        ...


class TopkStage(Protocol):
    """The top-k forward stage (ops/linear_topk.py); its backward is LogprobStages.backward
    with sparse terms."""

    def topk_stats(self, hidden: torch.Tensor, weight: torch.Tensor,
                   local_labels: torch.Tensor | None, inv_temperature: InvTemperature,
                   with_entropy: bool, k: int, *, logits_dtype: torch.dtype | None = None,
                   merged: bool = True, finalize: FinalizeRequest | None = None,
                   ) -> tuple:
        """(stats [N, 4] fp32 exactly as forward_stats, [S, N, 4] parts with
        ``merged=False`` as there, values [N, k] fp32: the k largest
        z of this shard, descending, ties to the lower id, ids [N, k] int64: their indices
        into this shard; a shard with fewer than k columns pads with (-inf,
        topk_merge.PAD_ID)).

        ``finalize`` (no TP: nothing comes between the statistics and finalize): the first
        item is ``LogprobStages.finalize``'s outputs of the statistics instead (with the
        request's labels, vocab size, ignore_index and record_alloc, and ``with_entropy``;
        ``merged`` then has no say), and the values are log-probs, as finalize's ``values``
        makes them; the Triton stage runs it in its last kernel's launch where one launch
        takes every row."""
        ...


def _pick(device: torch.device) -> tuple[LogprobStages, TopkStage]:
    wanted = env_value(IMPL_ENV)
    picked = _picked.get((wanted, device.type))
    if picked is None:  # the import statement and the checks: once per setting and device
        picked = _picked[wanted, device.type] = _pick_uncached(wanted, device)
    return picked


# ($MEGATRON_OVERLAY_IMPL as set, device type) -> the stages. A Triton that fails to import
# (unset setting, CUDA: the torch stages) is not retried for the process's life.
_picked: dict = {}


def _pick_uncached(setting: str, device: torch.device) -> tuple[LogprobStages, TopkStage]:
    wanted = setting.strip().lower()
    if wanted not in ("", "torch", "triton"):  # a typo would silently pick the default
        raise ValueError(f"{IMPL_ENV}={setting!r}: set it to 'torch' (the "
                         f"chunked torch stages) or 'triton' (the Triton kernels), or unset "
                         f"it (Triton on CUDA, torch elsewhere)")
    if wanted != "torch" and (wanted == "triton" or device.type == "cuda"):
        try:
            from .kernels import triton_impl, triton_topk
        except ImportError as err:
            if wanted == "triton":
                raise RuntimeError(f"{IMPL_ENV}=triton but Triton is not importable; "
                                   f"`pip install triton` or unset {IMPL_ENV}") from err
        else:
            return triton_impl, triton_topk
    return torch_chunked, torch_topk


def pick_impl(device: torch.device) -> LogprobStages:
    """The log-prob stages for ``device`` (override with $MEGATRON_OVERLAY_IMPL)."""
    return _pick(device)[0]


def pick_topk_impl(device: torch.device) -> tuple[TopkStage, LogprobStages]:
    """(top-k stage, log-prob stages) for ``device``; the same choice as pick_impl."""
    stages, topk = _pick(device)
    return topk, stages
