"""Merge each row's k ordered runs of the rescan's candidates into its top k: a k-way merge.

topk_rescan.py leaves each row k (k + 1) / 2 candidates in k runs: run j (the row's j-th
best tile) holds at most k - j of them at j k - j (j - 1) / 2, taken largest first, ties
to the lower column, then unfilled slots (-inf, V). Each run is thus already in the
contract's order (descending value, ties to the lower id; merge_topk.py's int64 keys
descend along it), so the row's top k are k steps of a merge of the runs' heads: take
the largest of the k heads, then load that run's next candidate in its place.

merge_topk.py orders the same candidates by k extractions over the whole row (1024-wide
int64 rows at k = 32: k x 1024 keys a row); here a step is one k-wide maximum and one
load a row, k x k keys a row, and the outputs are the same bits (keys, their order and
their decoding are merge_topk's): the interpreter test ``mergeruns`` holds the two to it.
A row whose values are NaN (an invalid temperature: topk_rescan.py ranks its logits by
themselves and stores NaN) is merged on keys that read NaN as -inf, so on ids alone: its
runs are not sorted by those keys, and its k ids are k distinct real candidates
(a run's real candidates come before its unfilled slots), NaN values, as merge_topk's;
which ids the contract leaves open.
"""

import torch
import triton
import triton.language as tl

from ..topk_merge import PAD_ID
from .finalize_stats import FINALIZE_BLOCK, Finalizing, finalize_outputs, finalize_rows
from .launch import cdiv, launch, next_power_of_2
from .merge_topk import NONE_KEY, _decode, _key, _launch_merge

# Heads a program holds (int64 keys, 8 a thread at 4 warps): rows a program = this // the
# runs a row (a power of 2 >= k), so 32 rows at k = 32 and 256 programs at 8192 tokens;
# each step of a row waits on one load, which the other programs' steps hide.
MERGE_RUNS_KEYS = 1024
# Calls of up to MERGE_EXTRACT_MAX_ROWS rows, of up to MERGE_EXTRACT_MAX_CANDIDATES
# candidates a row, are merged by k extractions over each row's k (k + 1) / 2 candidates
# at once instead (merge_topk.py's kernel, MERGE_EXTRACT_ELEMENTS candidates a program,
# padded to a power of 2; the same keys, so the same bits): no step waits on a load, where
# each of the k steps above waits on one, and small calls have few programs to hide it.
# Measured on one H100 (pass 29, r1: docs/h200/pass29/tail_sweep.py, us): at 256 tokens,
# k = 32, 18.6 against 29.1 (1024 candidates a program: one row; 2048: 24.6, 4096: 35.0),
# at k = 8 ~10 either way (13.3 -> 11.7 with finalize's labels); at 1024 tokens, k = 32,
# 45.6 against 32.5: not there. 0: never.
MERGE_EXTRACT_MAX_ROWS = 256
MERGE_EXTRACT_MAX_CANDIDATES = 1024
MERGE_EXTRACT_ELEMENTS = 1024


@triton.jit
def _run_key(cand_v_ptr, cand_i_ptr, src, slot, ok, V):
    """The candidates' int64 keys (merge_topk.py's): of unfilled slots (ids >= V) by their
    ``slot`` in the row, so that all keys differ; where not ``ok``, below every key."""
    value = tl.load(cand_v_ptr + src, mask=ok, other=float("-inf"))
    ids = tl.load(cand_i_ptr + src, mask=ok, other=0)
    ids = tl.where(ids < V, ids, V + slot)
    return tl.where(ok, _key(value, ids), NONE_KEY), value


@triton.jit
def merge_runs_kernel(cand_v_ptr, cand_i_ptr, out_v_ptr, out_i_ptr, N, V, K,
                      stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr, valid_ptr,
                      bad_ptr, rec_ptr, num_shards, vocab_size, ignore_index,
                      BLOCK_R: tl.constexpr, KP: tl.constexpr, PAD: tl.constexpr,
                      FINALIZE: tl.constexpr, HAS_LABELS: tl.constexpr,
                      WITH_ENTROPY: tl.constexpr):
    """cand [N, K (K + 1) / 2] fp32 values, int32 ids in runs (above) -> out [N, K] fp32
    values, int64 ids (PAD for an unfilled place). ``FINALIZE``: the rows' finalize too
    (finalize_stats.finalize_rows, a record row a program; its arguments unused
    otherwise), and the values written as log-probs, z - lse."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    keep = rows < N
    if FINALIZE:  # before the merge: its loads do not wait on the merge's
        lse = finalize_rows(stats_ptr, labels_ptr, lse_ptr, mean_z_ptr, ent_ptr, lp_ptr,
                            valid_ptr, bad_ptr, rec_ptr, pid, rows, keep, N, num_shards,
                            vocab_size, ignore_index, HAS_LABELS, WITH_ENTROPY, BLOCK_R)
    run = tl.arange(0, KP)
    start = run * K - run * (run - 1) // 2  # run j's first slot
    end = start + K - run                   # past its last
    row_base = rows.to(tl.int64) * (K * (K + 1) // 2)
    at = start[None, :] + tl.zeros([BLOCK_R, KP], tl.int32)  # each run's head: its slot
    ok = keep[:, None] & (run < K)[None, :]
    keys, heads = _run_key(cand_v_ptr, cand_i_ptr, row_base[:, None] + at, at, ok, V)
    nan_row = tl.max((heads != heads).to(tl.int32), axis=1) > 0  # run 0's head is real
    out = rows.to(tl.int64) * K
    for i in range(K):
        best = tl.max(keys, axis=1)
        value, key_id = _decode(best, nan_row)
        if FINALIZE:  # finalize_kernel's subtraction
            value = value - lse
        tl.store(out_v_ptr + out + i, value, mask=keep)
        tl.store(out_i_ptr + out + i, tl.where(key_id < V, key_id, PAD), mask=keep)
        # the chosen run's next candidate takes its head's place (keys differ: one head)
        chosen = (keys == best[:, None]) & (best != NONE_KEY)[:, None]
        at = tl.where(chosen, at + 1, at)
        # its next slot, where the run has one (a next slot is never slot 0: 0 is none)
        slot = tl.sum(tl.where(chosen & (at < end[None, :]), at, 0), axis=1)
        head, _ = _run_key(cand_v_ptr, cand_i_ptr, row_base + slot, slot, slot > 0, V)
        keys = tl.where(chosen, head[:, None], keys)


def merge_runs(cand_v: torch.Tensor, cand_i: torch.Tensor, vocab: int, k: int,
               out: tuple[torch.Tensor, torch.Tensor], fin: Finalizing | None = None):
    """``out`` ([N, k] fp32 values, int64 ids, contiguous): each row's top k of its
    rescan candidates ``cand_v`` / ``cand_i`` ([N, k (k + 1) / 2], in k ordered runs).
    ``fin``: the rows' finalize in the same launch, its outputs returned (else None) and
    the values written as log-probs."""
    n_rows = cand_v.shape[0]
    width = k * (k + 1) // 2
    if n_rows <= MERGE_EXTRACT_MAX_ROWS and width <= MERGE_EXTRACT_MAX_CANDIDATES:
        merged = _launch_merge(cand_v, cand_i, n_rows, vocab, width, 1, k, (0, width, 1), out,
                               MERGE_EXTRACT_ELEMENTS, fin=fin)
        return None if fin is None else merged[2]
    runs = next_power_of_2(k)
    block_r = max(1, MERGE_RUNS_KEYS // runs)
    if fin is not None:  # finalize's rows a program at most (its registers)
        block_r = min(block_r, FINALIZE_BLOCK)
    programs = cdiv(n_rows, block_r)
    finalized, fin_args, fin_flags = finalize_outputs(fin, n_rows, programs, cand_v)
    launch(merge_runs_kernel, (programs,),
           cand_v, cand_i, out[0], out[1], n_rows, vocab, k, *fin_args, BLOCK_R=block_r,
           KP=runs, PAD=PAD_ID, **fin_flags, num_warps=4)
    return finalized
