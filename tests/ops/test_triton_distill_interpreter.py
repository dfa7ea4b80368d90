"""The top-k Triton kernel and per-row temperatures in the log-prob kernels, under
TRITON_INTERPRET=1 on CPU, against the chunked torch path.

As tests/ops/test_triton_interpreter.py: one subprocess (this file with ``--worker``) runs
every case with the variable set from its start and reports JSON. Tiny shapes with partial
tiles (the interpreter config is 16 x 32 x 16), equal logits at the k-th place, shards
narrower than k, per-row temperatures; then both new ops end to end (values and
gradients) with MEGATRON_OVERLAY_IMPL=triton against =torch.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys

import pytest

from tests.support.interpreter import interpreter_report

# the last: k past merge_topk.SELECT_MIN_K (its tiles picked by selection)
TOPK_SHAPES = [(33, 32, 130, 3), (5, 16, 50, 8), (20, 16, 200, 20), (9, 16, 5, 8), (17, 16, 64, 1),
               (13, 16, 900, 26)]
DTYPES = ["float32", "bfloat16"]
GRAD_TOL = {"float32": 2e-5, "bfloat16": 2e-2, "float16": 3e-3}
STATS_TOL = 2e-5

CASES = ([f"topk-{n}x{h}x{v}-k{k}-{d}" for n, h, v, k in TOPK_SHAPES for d in DTYPES]
         + [f"rowtemp-{d}" for d in DTYPES] + [f"sparse-{d}" for d in DTYPES + ["float16"]]
         + [f"gather-{d}" for d in DTYPES]
         + [f"op-{d}" for d in DTYPES] + [f"invariant-{d}" for d in DTYPES]
         + ["mergetopk-float32", "mergeruns-float32", "selecttiles-float32", "tilesort-int64",
            "secondmax-float32"]
         + [f"checkids-{d}" for d in ("int64", "int32")]
         + [f"unmerged-{d}" for d in DTYPES] + [f"fused-{d}" for d in DTYPES]
         + [f"clustered-{d}" for d in DTYPES]
         + [f"scaledties-{d}" for d in DTYPES]
         + [f"modes-{m}" for m in ("bf16logits", "fp32hidden", "fp32weight")])
# The precision modes (issue 18): (hidden dtype, weight dtype, logits_dtype)
MODES = {"bf16logits": ("bfloat16", "bfloat16", "bfloat16"),
         "fp32hidden": ("float32", "bfloat16", None),
         "fp32weight": ("bfloat16", "float32", None)}


def _worker() -> int:
    assert os.environ.get("TRITON_INTERPRET") == "1"
    import torch

    from megatron_overlay.ops import (linear_logprob_entropy, linear_logprobs_at,
                                      linear_topk_logprobs, torch_chunked, torch_topk)
    from megatron_overlay.ops.kernels import split_operand, topk_forward, triton_impl, triton_topk

    assert triton_impl.interpreting()
    report = {}
    # the top-k's three paths: tiles' second maxima from k = 2, exact with the third
    # maxima (topk_forward.pack_third) or rounded up (pack_second), and never
    exact, rounded, never = (2, 10 ** 9), (2, 0), (10 ** 9, 0)
    second_max_paths = (exact, rounded, never)

    @contextlib.contextmanager
    def second_max_from(path):  # at every N (small launches have their own k)
        k, exact_rows = path
        default = (topk_forward.SECOND_MAX_MIN_K, topk_forward.SECOND_MAX_SMALL_MIN_K,
                   topk_forward.EXACT_SECOND_MAX_MIN_K, topk_forward.EXACT_SECOND_MAX_TOKENS)
        topk_forward.SECOND_MAX_MIN_K = topk_forward.SECOND_MAX_SMALL_MIN_K = k
        topk_forward.EXACT_SECOND_MAX_MIN_K = k
        topk_forward.EXACT_SECOND_MAX_TOKENS = exact_rows
        try:
            yield
        finally:
            (topk_forward.SECOND_MAX_MIN_K, topk_forward.SECOND_MAX_SMALL_MIN_K,
             topk_forward.EXACT_SECOND_MAX_MIN_K, topk_forward.EXACT_SECOND_MAX_TOKENS) = default

    def rel(a, b):
        return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()

    def inputs(n, h, v, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        hidden = torch.randn(n, h, generator=g).to(dtype)
        weight = (torch.randn(v, h, generator=g) * 0.6).to(dtype)
        weight[v - 1] = weight[min(2, v - 1)]  # equal logits: ties to the lower id
        labels = torch.randint(0, v, (n,), generator=g)
        labels[::3] = -1
        inv_t = torch.rand(n, generator=g) * 2 + 0.3
        return hidden, weight, labels, inv_t

    def modes_case(mode):
        """top-k and logits at ids in a precision mode, against the torch stages in it
        (random inputs, not bf16-exact where fp32, at one temperature and per row)."""
        h_name, w_name, l_name = MODES[mode]
        g = torch.Generator().manual_seed(21)
        hidden = torch.randn(33, 32, generator=g).to(getattr(torch, h_name))
        weight = (torch.randn(130, 32, generator=g) * 0.6).to(getattr(torch, w_name))
        labels = torch.randint(0, 130, (33,), generator=g)
        ids = torch.randint(-1, 130, (33, 9), generator=g)
        kw = dict(logits_dtype=getattr(torch, l_name) if l_name else None)
        res = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True, "dtype": "float32"}
        budget = split_operand.SPLIT_BUDGET_BYTES
        for temperature, pieces in ((torch.rand(33, generator=g) * 2 + 0.3, False),
                                    (1 / 0.7, False), (1 / 0.7, True)):
            ref = torch_topk.topk_stats(hidden, weight, labels, temperature, True, 5, **kw)
            if pieces:  # an fp32 operand's halves in 32-row / -column pieces
                split_operand.SPLIT_BUDGET_BYTES = 4 * 32 * 32
            got = triton_topk.topk_stats(hidden, weight, labels, temperature, True, 5, **kw)
            split_operand.SPLIT_BUDGET_BYTES = budget
            at_ref = torch_chunked.logits_at(hidden, weight, ids, temperature, **kw)
            at = triton_impl.logits_at(hidden, weight, ids, temperature, **kw)
            res["stats_err"] = max(res["stats_err"], (got[0] - ref[0]).abs().max().item())
            res["values_err"] = max(res["values_err"], (got[1] - ref[1]).abs().max().item(),
                                    (at - at_ref).abs().max().item())
            res["ids_equal"] &= torch.equal(got[2], ref[2])
        return res

    for case in CASES:
        try:
            kind, rest = case.split("-", 1)
            if kind == "modes":
                report[case] = modes_case(rest)
                continue
            dtype = getattr(torch, case.rsplit("-", 1)[1])
            if kind == "topk":
                shape, k = rest.split("-")[:2]
                n, h, v = map(int, shape.split("x"))
                k = int(k[1:])
                hidden, weight, labels, inv_t = inputs(n, h, v, dtype, seed=n + v)
                # Dyadic inputs (multiples of 1/4 and 1/8): every logit is exact whatever the
                # summation order, so the tied rows tie in both implementations. With random
                # floats a CPU BLAS may round a column in its vector tail differently (seen:
                # torch 2.13.0+cu130 on CPU gives the two equal rows of 9x16x5 logits 2.4e-7
                # apart), which is the reference breaking the tie, not the kernel.
                hidden = ((hidden.float() * 4).round() / 4).to(dtype)
                weight = ((weight.float() * 8).round() / 8).to(dtype)
                for temperature, splits, second_from in itertools.product(
                        (inv_t, 1 / 0.7), (None, 3), second_max_paths):
                    ref = torch_topk.topk_stats(hidden, weight, labels, temperature, True, k)
                    # the host's split count, then 3 splits (their merge) whatever it picks
                    with second_max_from(second_from):
                        got = triton_topk.topk_stats(hidden, weight, labels, temperature, True,
                                                     k, splits=splits)
                    report.setdefault(case, {"stats_err": 0.0, "values_err": 0.0,
                                             "ids_equal": True, "dtype": str(dtype)[6:]})
                    res = report[case]
                    # relative where a statistic passes 1: the sum of exponentials grows with
                    # V (900 columns: ~1e-4 apart in fp32, 1e-7 of it)
                    res["stats_err"] = max(res["stats_err"], ((got[0] - ref[0]).abs()
                                                              / ref[0].abs().clamp(min=1)).max().item())
                    finite = torch.isfinite(ref[1])
                    res["values_err"] = max(
                        res["values_err"], (got[1][finite] - ref[1][finite]).abs().max().item())
                    res["ids_equal"] &= torch.equal(got[2], ref[2])
            elif kind == "rowtemp":  # the log-prob stages with per-row temperatures
                hidden, weight, labels, inv_t = inputs(33, 32, 130, dtype, seed=4)
                ref = torch_chunked.forward_stats(hidden, weight, labels, inv_t, True)
                got = triton_impl.forward_stats(hidden, weight, labels, inv_t, True)
                lse = ref[:, 0] + ref[:, 1].log()
                mean_z = ref[:, 0] + ref[:, 2] / ref[:, 1]
                g = torch.Generator().manual_seed(7)
                g_lp, g_ent = torch.randn(33, generator=g), torch.randn(33, generator=g)
                rdh, rdw = torch_chunked.backward(hidden, weight, labels, inv_t, lse, mean_z,
                                                  g_lp, g_ent)
                dh, dw = triton_impl.backward(hidden, weight, labels, inv_t, lse, mean_z, g_lp,
                                              g_ent)
                report[case] = {"stats_err": (got - ref).abs().max().item(), "values_err": 0.0,
                                "ids_equal": True, "dh_err": rel(dh, rdh),
                                "dw_err": rel(dw, rdw), "dtype": str(dtype)[6:]}
            elif kind == "clustered":  # the rescan: a row's top k in few candidate tiles
                # (interpreter tile: 32 columns) one tile's logits scaled up, so that most of
                # the top k lie in it; two more tiles the same as it (equal maxima: the
                # lower tile is kept), and a row of equal logits (every tile ties)
                hidden, weight, labels, inv_t = inputs(19, 16, 200, dtype, seed=17)
                hidden = ((hidden.float() * 4).round() / 4).to(dtype)
                weight = ((weight.float() * 8).round() / 8)
                weight[32:64] *= 4
                weight[96:128] = weight[32:64]
                weight[160:192] = weight[32:64]
                weight = weight.to(dtype)
                hidden[7] = 0
                res = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True,
                       "dtype": str(dtype)[6:]}
                from megatron_overlay.ops.kernels import topk_rescan
                budget = topk_rescan.RESCAN_BUDGET_BYTES, topk_rescan.FORWARD_EXTRA_BYTES
                prefetch_default = topk_rescan.RESCAN_PREFETCH
                # and the rescan's A/B setting RESCAN_PREFETCH (off by default) on
                for (k, temperature, rows), second_from, prefetch in itertools.product(
                        ((1, inv_t, 0), (5, inv_t, 0), (5, 1 / 0.7, 4), (12, inv_t, 3),
                         (12, 1 / 0.7, 0), (40, inv_t, 0)), second_max_paths, (False, True)):
                    if prefetch and k == 1:
                        continue  # no rescan
                    topk_rescan.RESCAN_PREFETCH = prefetch
                    if rows:  # the rescan in blocks of this many rows
                        topk_rescan.RESCAN_BUDGET_BYTES = rows * topk_rescan.rescan_row_bytes(k)
                        topk_rescan.FORWARD_EXTRA_BYTES = 0
                    ref = torch_topk.topk_stats(hidden, weight, labels, temperature, True, k)
                    try:
                        with second_max_from(second_from):
                            got = triton_topk.topk_stats(hidden, weight, labels, temperature,
                                                         True, k, splits=3)
                    finally:
                        topk_rescan.RESCAN_BUDGET_BYTES, topk_rescan.FORWARD_EXTRA_BYTES = budget
                        topk_rescan.RESCAN_PREFETCH = prefetch_default
                    res["stats_err"] = max(res["stats_err"], (got[0] - ref[0]).abs().max().item())
                    res["values_err"] = max(res["values_err"],
                                            (got[1] - ref[1]).abs().max().item())
                    res["ids_equal"] &= torch.equal(got[2], ref[2])
                report[case] = res
            elif kind == "scaledties":  # distinct logits that T rounds to one z
                # (tests/support/scaled_ties.py). Layouts (interpreter tile: 32 columns):
                # the two in one tile, the lower id's tile before the other's, after it
                from tests.support.scaled_ties import TEMPERATURE, scaled_tie_inputs
                g = torch.Generator().manual_seed(5)
                n, v = 6, 130
                inv_t = torch.full((n,), 1 / TEMPERATURE)
                inv_t[4] = float("nan")  # an invalid temperature's row (CUDA: no host check)
                res = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True,
                       "dtype": str(dtype)[6:], "nan_rows": True}
                for (low, high, best), k, second_from in itertools.product(
                        ((33, 40, 100), (5, 40, 100), (100, 40, 5)), (1, 2, 3),
                        second_max_paths):
                    h, w = scaled_tie_inputs(n, 16, v, low, high, best, dtype, g)
                    for temperature in (1 / TEMPERATURE, inv_t):
                        ref = torch_topk.topk_stats(h, w, None, temperature, True, k)
                        with second_max_from(second_from):
                            got = triton_topk.topk_stats(h, w, None, temperature, True, k)
                        ok = ~torch.isnan(ref[1]).any(dim=1)
                        res["stats_err"] = max(res["stats_err"],
                                               (got[0][ok] - ref[0][ok]).abs().max().item())
                        res["values_err"] = max(res["values_err"],
                                                (got[1][ok] - ref[1][ok]).abs().max().item())
                        res["ids_equal"] &= torch.equal(got[2][ok], ref[2][ok])
                        # the invalid row: NaN values, real ids (never a plausible number)
                        res["nan_rows"] &= bool(got[1][~ok].isnan().all()) and bool(
                            ((got[2][~ok] >= 0) & (got[2][~ok] < v)).all())
                report[case] = res
            elif kind == "fused":  # topk_stats(finalize=...): finalize's outputs in its kernels
                from megatron_overlay.ops.kernels import finalize_stats, topk_rescan
                from megatron_overlay.ops.params import FinalizeRequest
                hidden, weight, labels, inv_t = inputs(33, 32, 130, dtype, seed=17)
                labels[::3] = -100  # ignored; two out of range (NaN log-probs, a record)
                labels[4], labels[20] = 130, -7

                def record(rec):  # the rows reduced, as label_check reads them
                    return (int(rec[:, 0].sum()), int(rec[:, 1].min()), int(rec[:, 2].max()),
                            int(rec[:, 3].min()))

                def equal(a, b):
                    return (a is None) == (b is None) and (a is None or (
                        torch.equal(a.isnan(), b.isnan())
                        and torch.equal(a.nan_to_num(), b.nan_to_num())))

                def fused_and_apart(k, with_entropy, temperature, labels):
                    req = FinalizeRequest(labels, 130, -100)
                    local = None if labels is None else torch.where(
                        (labels < 0) | (labels >= 130), -1, labels)
                    got = triton_topk.topk_stats(hidden, weight, local, temperature,
                                                 with_entropy, k, finalize=req)
                    stats, values, ids = triton_topk.topk_stats(
                        hidden, weight, local, temperature, with_entropy, k, merged=False)
                    ref = triton_impl.finalize(stats, labels, 130, -100, with_entropy,
                                               values=values)
                    same = all(equal(a, b) for a, b in zip(got[0][:6], ref[:6]))
                    same &= equal(got[1], values) and torch.equal(got[2], ids)
                    if labels is not None:
                        same &= record(got[0][6]) == record(ref[6])
                    return same

                # in the stage's last kernel: finalize's own launch never runs
                own = finalize_stats.finalize
                calls = []
                finalize_stats.finalize = lambda *a, **kw: calls.append(1) or own(*a, **kw)
                fused = True
                # each k (merge_topk at 1, merge_runs after best_tiles' extractions at 4
                # and its selection at 26) on each second-maxima path, the options in turn
                options = itertools.cycle(itertools.product(
                    (True, False), (inv_t, 1 / 0.7), (labels, None)))
                try:
                    for k, path in itertools.product((1, 4, 26), second_max_paths):
                        with second_max_from(path):
                            fused &= fused_and_apart(k, *next(options))
                    in_kernel = not calls
                    # rescan row blocks: finalize's own launch, the same outputs
                    block_rows = topk_rescan.rescan_block_rows
                    topk_rescan.rescan_block_rows = lambda k, alive: 4
                    try:
                        fused &= fused_and_apart(4, True, inv_t, labels)
                    finally:
                        topk_rescan.rescan_block_rows = block_rows
                    apart = bool(calls)
                finally:
                    finalize_stats.finalize = own
                report[case] = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True,
                                "fused": fused and in_kernel and apart,
                                "dtype": str(dtype)[6:]}
            elif kind == "unmerged":  # forward stages' merged=False: finalize's outputs alike
                hidden, weight, labels, inv_t = inputs(33, 32, 130, dtype, seed=13)
                same, parts = True, []

                def outputs(stats):  # labels -1 ignored: no NaN (NaN != NaN in torch.equal)
                    return triton_impl.finalize(stats, labels, 130, -1, True)

                for temperature in (inv_t, 1 / 0.7):
                    merged = triton_impl.forward_stats(hidden, weight, labels, temperature, True)
                    unmerged = triton_impl.forward_stats(hidden, weight, labels, temperature,
                                                         True, merged=False)
                    top_m = triton_topk.topk_stats(hidden, weight, labels, temperature, True, 4)
                    top_u = triton_topk.topk_stats(hidden, weight, labels, temperature, True, 4,
                                                   merged=False)
                    parts += [unmerged.shape[0], top_u[0].shape[0]]
                    same &= all(torch.equal(a, b) for a, b in
                                zip(outputs(merged[None]), outputs(unmerged)))
                    same &= all(torch.equal(a, b) for a, b in
                                zip(outputs(top_m[0][None]), outputs(top_u[0])))
                    same &= torch.equal(top_m[1], top_u[1]) and torch.equal(top_m[2], top_u[2])
                # the top-k merges its chunks itself where they would cut the rescan into
                # more row blocks than the merged statistics: [1, N, 4], the same outputs
                block_rows = topk_forward.rescan_block_rows
                topk_forward.rescan_block_rows = lambda k, alive: 4 if alive > 16 * 33 + \
                    33 * k * 12 else 1000
                try:
                    top_e = triton_topk.topk_stats(hidden, weight, labels, inv_t, True, 4,
                                                   merged=False)
                finally:
                    topk_forward.rescan_block_rows = block_rows
                top_m = triton_topk.topk_stats(hidden, weight, labels, inv_t, True, 4)
                same &= top_e[0].shape[0] == 1 and all(torch.equal(a, b) for a, b in zip(
                    outputs(top_m[0][None]), outputs(top_e[0])))
                same &= torch.equal(top_m[1], top_e[1]) and torch.equal(top_m[2], top_e[2])
                report[case] = {"stats_err": 0.0, "values_err": 0.0, "parts": parts,
                                "ids_equal": same and min(parts) > 1, "dtype": str(dtype)[6:]}
            elif kind == "checkids":  # the ids' check and shard: kernel against torch
                g = torch.Generator().manual_seed(12)

                def summary(rec):  # the record's rows reduced, as label_check reads them
                    rows = [r for r in rec.tolist() if r[0]]
                    return (sum(r[0] for r in rows), min((r[1] for r in rows), default=None),
                            max((r[2] for r in rows), default=None),
                            min((r[3] for r in rows), default=None))

                same, vocab = True, 90
                weights = torch.randn(vocab, 16, generator=g).to(torch.bfloat16)
                for n, k in ((45, 3), (33, 70), (1, 1), (64, 129), (3, 0)):
                    ids = torch.randint(-3, vocab + 3, (n, k), generator=g).to(dtype)
                    ids[n // 2] = ids[n // 2].clamp(0, vocab - 1)  # a clean row
                    hidden = torch.randn(n, 16, generator=g).to(torch.bfloat16)
                    inv_t = torch.rand(n, generator=g) + 0.5
                    for start, width in ((0, vocab), (0, 30), (30, 30), (60, 30)):
                        ref = torch_chunked.check_ids(ids, start, width, vocab)
                        got = triton_impl.check_ids(ids, start, width, vocab)
                        same &= (torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
                                 and summary(got[2]) == summary(ref[2])
                                 and got[0].dtype == torch.int64)
                        # the check and the gather in one launch (the op's path): the two
                        # kernels' outputs bit for bit, the gather's at the global ids
                        weight = weights[start:start + width]
                        for temperature in (inv_t, 1 / 0.7):
                            fused = triton_impl.logits_at_ids(hidden, weight, ids, start, width,
                                                              vocab, temperature)
                            z = triton_impl.logits_at(hidden, weight, got[0], temperature)
                            same &= all(torch.equal(a, b) for a, b in zip(fused, (z, *got)))
                report[case] = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": same,
                                "dtype": str(dtype)[6:]}
            elif kind == "gather":  # logits at given ids: the kernel against the torch stage
                hidden, weight, _, inv_t = inputs(13, 40, 70, dtype, seed=5)
                ids = torch.randint(-1, 70, (13, 37), generator=torch.Generator().manual_seed(6))
                err = 0.0
                for temperature in (inv_t, 1 / 0.7):
                    ref = torch_chunked.logits_at(hidden, weight, ids, temperature)
                    got = triton_impl.logits_at(hidden, weight, ids, temperature)
                    assert torch.equal(got == 0, ref == 0), "a -1 id gave a nonzero logit"
                    err = max(err, (got - ref).abs().max().item())
                report[case] = {"stats_err": 0.0, "values_err": err, "ids_equal": True,
                                "dtype": str(dtype)[6:]}
            elif kind == "sparse":  # the backward's sparse indicator terms, in 2 vocab chunks
                # of one token block, then of 3 (the block's slices of the ids and grads)
                hidden, weight, _, inv_t = inputs(21, 16, 130, dtype, seed=8)
                g = torch.Generator().manual_seed(9)
                ids = torch.randint(0, 130, (21, 6), generator=g)
                ids[:, 1] = ids[:, 0]  # repeats add up
                ids[::4, 2] = -1       # in another shard
                vals = torch.randn(21, 6, generator=g)
                no_label = torch.full((21,), -1)
                stats = torch_chunked.forward_stats(hidden, weight, no_label, inv_t, True)
                lse = stats[:, 0] + stats[:, 1].log()
                mean_z = stats[:, 0] + stats[:, 2] / stats[:, 1]
                g_ent = torch.randn(21, generator=g)
                args = (hidden, weight, no_label, inv_t, lse, mean_z, vals.sum(1), g_ent)
                rdh, rdw = torch_chunked.backward(*args, sparse_ids=ids, sparse_grads=vals)
                dh_err = dw_err = 0.0
                for rows in (21, 8):
                    dh, dw = triton_impl.backward(*args, sparse_ids=ids, sparse_grads=vals,
                                                  chunk_budget=rows * 70 * hidden.element_size(),
                                                  block_tokens=rows)
                    dh_err, dw_err = max(dh_err, rel(dh, rdh)), max(dw_err, rel(dw, rdw))
                report[case] = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True,
                                "dh_err": dh_err, "dw_err": dw_err, "dtype": str(dtype)[6:]}
            elif kind == "tilesort":  # the rescan's pairs by tile: torch.sort's stable order
                from megatron_overlay.ops.kernels.tile_sort import (SORT_BLOCK_INTERPRETED,
                                                                    SORT_FEW_INTERPRETED,
                                                                    sort_tiles)
                from megatron_overlay.ops.topk_merge import PAD_ID
                from tests.support.tile_runs import runs_reference
                g = torch.Generator().manual_seed(5)
                same = True
                # one block, a partial last block, several blocks, one tile, unfilled slots;
                # then lone blocks of few pairs with a tile (the rest known maxima' codes
                # past the tiles or unfilled): up to SORT_FEW_INTERPRETED of them placed
                # without a sort, one more sorted
                few = SORT_FEW_INTERPRETED
                for pairs, num_t, with_tile in ((1, 4, 0), (SORT_BLOCK_INTERPRETED, 3, 0),
                                                (3 * SORT_BLOCK_INTERPRETED + 7, 37, 0),
                                                (150, 1, 0), (200, 594, 0),
                                                (SORT_BLOCK_INTERPRETED, 37, few),
                                                (SORT_BLOCK_INTERPRETED - 5, 37, few + 1),
                                                (40, 594, few - 3), (30, 5, 1), (20, 5, 0)):
                    tiles = torch.randint(0, num_t, (pairs,), generator=g)
                    tiles[torch.rand(pairs, generator=g) < 0.2] = PAD_ID
                    if with_tile or pairs == 20:  # the rest past the tiles: codes, PAD_ID
                        tiles = num_t + 1 + torch.randint(0, 1000, (pairs,), generator=g)
                        tiles[::3] = PAD_ID
                        mine = torch.randperm(pairs, generator=g)[:with_tile]
                        tiles[mine] = torch.randint(0, num_t, (with_tile,), generator=g)
                    seg_rows = 1 + pairs % 5  # segments of 1 to 5 pairs
                    got_t, got_p, runs = sort_tiles(tiles.view(-1, 1) if pairs % 2 else tiles,
                                                    num_t, seg_rows)
                    ref_t, ref_p = torch.sort(tiles.clamp(max=num_t), stable=True)
                    same &= got_t.dtype == got_p.dtype == torch.int32
                    same &= torch.equal(got_t.long(), ref_t) and torch.equal(got_p.long(), ref_p)
                    same &= torch.equal(runs, runs_reference(tiles, num_t, seg_rows,
                                                             runs.shape[1]))
                report[case] = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": same,
                                "dtype": "int64"}
            elif kind == "mergetopk":  # the splits' lists merge: kernel vs torch's sorts
                from megatron_overlay.ops.kernels.merge_topk import merge_topk
                from megatron_overlay.ops.topk_merge import PAD_ID, order_candidates
                g = torch.Generator().manual_seed(13)
                splits, n, k, vocab = 3, 37, 6, 50
                part_v = (torch.randint(-4, 5, (splits, n, k), generator=g) / 2).float()
                part_v[0, :5] = -0.0  # equal values across splits, -0.0 beside +0.0
                part_v[1, :5] = 0.0
                # each id once a row (splits hold disjoint vocab ranges)
                part_i = torch.stack([torch.randperm(vocab, generator=g)[:splits * k]
                                      for _ in range(n)]).view(n, splits, k)
                part_i = part_i.permute(1, 0, 2).contiguous().int()
                part_i[2, 7:9, 3:] = vocab + torch.arange(3).int()  # unfilled slots
                part_v[2, 7:9, 3:] = float("-inf")
                part_v[:, 11] = float("nan")  # an invalid temperature's row
                got_v, got_i = merge_topk(part_v, part_i, vocab)
                cand_i = part_i.permute(1, 0, 2).reshape(n, -1).long()
                cand_i = torch.where(cand_i >= vocab, PAD_ID, cand_i)
                ref_v, ref_i = order_candidates(part_v.permute(1, 0, 2).reshape(n, -1),
                                                cand_i, k)
                same_v = torch.equal(got_v.isnan(), ref_v.isnan()) and \
                    torch.equal(got_v.nan_to_num(), ref_v.nan_to_num())
                same_i = torch.equal(got_i, ref_i)
                # each row's k best tiles of the forward kernel's [tiles, N] maxima: equal
                # maxima (-0.0 beside +0.0 too) to the lower tile; k past the tile count
                from megatron_overlay.ops.kernels.merge_topk import best_tiles
                from megatron_overlay.ops.topk_merge import pad_candidates
                for num_t, k in ((37, 6), (5, 8), (1, 1), (300, 32)):
                    maxima = (torch.randint(-4, 5, (num_t, n), generator=g) / 2).float()
                    maxima[:, 3] = -0.0
                    maxima[::2, 3] = 0.0
                    maxima[:, 5] = float("-inf")
                    got_v, got_i = best_tiles(maxima, k)
                    ref_v, ref_i = pad_candidates(*order_candidates(
                        maxima.t(), torch.arange(num_t).expand(n, num_t), k), k)
                    same_v &= torch.equal(got_v, ref_v)
                    same_i &= torch.equal(got_i, ref_i)
                    # with the tiles' second maxima (topk_forward.pack_second's layout; here
                    # halves, exact in bfloat16, so ties with thr too) and argmax columns:
                    # codes past the tile count where the second maximum is below thr
                    second = maxima - (torch.randint(0, 3, (num_t, n), generator=g) / 2)
                    second[:, 4] = float("-inf")  # tiles of one logit
                    at = torch.randint(0, 32, (num_t, n), generator=g, dtype=torch.int32)
                    packed = (second.view(torch.int32) & -65536) | at
                    got_v, got_c = best_tiles(maxima, k, packed, 32)
                    tile = ref_i.clamp(max=num_t - 1).t()
                    rows = torch.arange(n).expand(k, n)
                    known = (second[tile, rows] < ref_v[:, -1]).t()
                    ref_c = torch.where(known, num_t + 1 + ref_i * 32 + at[tile, rows].t(), ref_i)
                    ref_c = torch.where(ref_i == PAD_ID, PAD_ID, ref_c)
                    same_v &= torch.equal(got_v, ref_v)
                    same_i &= torch.equal(got_c, ref_c)
                    # pack_third's layout: the exact second maxima beside, the third rounded
                    # up (halves again) and both columns packed; a known tile's code carries
                    # the second's column and bits (merge_topk.CODE_ID_BITS)
                    third = second - (torch.randint(0, 3, (num_t, n), generator=g) / 2)
                    at2 = torch.randint(0, 32, (num_t, n), generator=g, dtype=torch.int32)
                    packed = (third.view(torch.int32) & -65536) | (at2 << 8) | at
                    got_v, got_c = best_tiles(maxima, k, packed, 32, second)
                    known = (third[tile, rows] < ref_v[:, -1]).t()
                    bits = (second.view(torch.int32) ^ -8388608).long() & 0xFFFFFFFF
                    fields = (bits << 31) | (at2.long() << 23)
                    ref_c = torch.where(known, num_t + 1 + ref_i * 32 + at[tile, rows].t()
                                        + fields[tile, rows].t(), ref_i)
                    ref_c = torch.where(ref_i == PAD_ID, PAD_ID, ref_c)
                    same_v &= torch.equal(got_v, ref_v)
                    same_i &= torch.equal(got_c, ref_c)
                # calls whose rows a program (one per BEST_TILES_ROW_TOKENS rows) round
                # down to a power of 2: 3 -> 2 at 768 rows, 5 -> 4 at 1280
                for rows in (768, 1280):
                    maxima = (torch.randint(-4, 5, (5, rows), generator=g) / 2).float()
                    got_v, got_i = best_tiles(maxima, 2)
                    ref_v, ref_i = pad_candidates(*order_candidates(
                        maxima.t(), torch.arange(5).expand(rows, 5), 2), 2)
                    same_v &= torch.equal(got_v, ref_v)
                    same_i &= torch.equal(got_i, ref_i)
                report[case] = {"stats_err": 0.0, "dtype": "float32",
                                "values_err": 0.0 if same_v else 1.0, "ids_equal": same_i}
            elif kind == "mergeruns":  # the rescan's k ordered runs a row: merge_topk's bits
                from megatron_overlay.ops.kernels import merge_runs as merge_runs_module
                from megatron_overlay.ops.kernels.merge_runs import merge_runs
                from megatron_overlay.ops.kernels.merge_topk import merge_topk
                from megatron_overlay.ops.topk_merge import PAD_ID
                from tests.support.candidate_runs import candidate_runs
                g = torch.Generator().manual_seed(17)
                same_v = same_i = True
                default_extract = merge_runs_module.MERGE_EXTRACT_MAX_ROWS
                default_elements = merge_runs_module.MERGE_EXTRACT_ELEMENTS
                # both forms: the runs' heads merged, and every candidate's extractions
                # (small calls; 2 rows a program, so that a call takes several)
                for (n, k, vocab), extract in itertools.product(
                        ((40, 6, 300), (9, 1, 20), (13, 2, 50), (33, 8, 500), (5, 20, 400)),
                        (0, 10 ** 9)):
                    cand_v, cand_i, nan_rows = candidate_runs(n, k, vocab, g)
                    out = (torch.empty(n, k), torch.empty(n, k, dtype=torch.int64))
                    merge_runs_module.MERGE_EXTRACT_MAX_ROWS = extract
                    merge_runs_module.MERGE_EXTRACT_ELEMENTS = 2 << (
                        k * (k + 1) // 2 - 1).bit_length()
                    try:
                        merge_runs(cand_v, cand_i, vocab, k, out)
                    finally:
                        merge_runs_module.MERGE_EXTRACT_MAX_ROWS = default_extract
                        merge_runs_module.MERGE_EXTRACT_ELEMENTS = default_elements
                    ref_v, ref_i = merge_topk(cand_v[None], cand_i[None], vocab, k)
                    ok = ~nan_rows
                    same_v &= torch.equal(out[0][ok], ref_v[ok])
                    same_i &= torch.equal(out[1][ok], ref_i[ok])
                    # a NaN row (an invalid temperature): NaN values, distinct real ids of
                    # the row's candidates, as many as it has up to k, then PAD_ID (which
                    # ids: the contract leaves open)
                    same_v &= bool(out[0][nan_rows].isnan().all())
                    for r in nan_rows.nonzero().flatten().tolist():
                        real = set(cand_i[r][cand_i[r] < vocab].tolist())
                        got = out[1][r].tolist()
                        picked = got[:min(k, len(real))]
                        same_i &= len(set(picked)) == len(picked) and set(picked) <= real
                        same_i &= all(i == PAD_ID for i in got[len(picked):])
                report[case] = {"stats_err": 0.0, "dtype": "float32",
                                "values_err": 0.0 if same_v else 1.0, "ids_equal": same_i}
            elif kind == "selecttiles":  # best_tiles by selection: the extractions' bits
                from megatron_overlay.ops.kernels import merge_topk as mt
                g = torch.Generator().manual_seed(3)
                same_v = same_i = True
                default = mt.SELECT_MIN_K
                for num_t, n, k, halves in ((300, 37, 32, True), (300, 16, 32, False),
                                            (20, 9, 16, True), (17, 12, 32, True),
                                            (5, 10, 16, False), (1000, 9, 40, False),
                                            (64, 11, 64, True)):
                    # halves: many ties at the k-th largest (the scan's branch); else
                    # distinct maxima (no ties: the plain branch, where every row of a
                    # program has none)
                    maxima = (torch.randint(-4, 5, (num_t, n), generator=g) / 2).float() \
                        if halves else torch.randn(num_t, n, generator=g)
                    if halves:
                        maxima[:, 3] = -0.0
                        maxima[::2, 3] = 0.0
                        maxima[:, 5] = float("-inf")
                    if n > 9 and halves:
                        maxima[:, 7] = float("nan")  # an invalid temperature's row
                        maxima[::3, 6] = float("nan")
                    second = maxima - (torch.randint(0, 3, (num_t, n), generator=g) / 2)
                    at = torch.randint(0, 32, (num_t, n), generator=g, dtype=torch.int32)
                    packed = (second.view(torch.int32) & -65536) | at
                    third = second - (torch.randint(0, 3, (num_t, n), generator=g) / 2)
                    at2 = torch.randint(0, 32, (num_t, n), generator=g, dtype=torch.int32)
                    packed3 = (third.view(torch.int32) & -65536) | (at2 << 8) | at
                    for tile_second, exact_second in ((None, None), (packed, None),
                                                      (packed3, second)):
                        try:
                            mt.SELECT_MIN_K = 10 ** 9
                            ref_v, ref_i = mt.best_tiles(maxima, k, tile_second, 32,
                                                         exact_second)
                            mt.SELECT_MIN_K = 1
                            got_v, got_i = mt.best_tiles(maxima, k, tile_second, 32,
                                                         exact_second)
                        finally:
                            mt.SELECT_MIN_K = default
                        same_v &= torch.equal(got_v.isnan(), ref_v.isnan()) and \
                            torch.equal(got_v.nan_to_num(), ref_v.nan_to_num())
                        same_i &= torch.equal(got_i, ref_i)
                report[case] = {"stats_err": 0.0, "dtype": "float32",
                                "values_err": 0.0 if same_v else 1.0, "ids_equal": same_i}
            elif kind == "secondmax":  # a tile's second (third) maximum rounded up, never down
                # logits (hidden rows one-hot) a bfloat16 step apart near thr = +-(1 + 2^-9):
                # row 0's tile 0 holds 3 and 1 + 2^-9 + 2^-12 > thr, tile 1 thr itself; row
                # 1 the same below zero. Rounded down to bfloat16, the second maximum would
                # read below thr and tile 0 would not be recomputed: its second logit lost.
                # Rows 2-3: the second maximum truly below thr (no rescan needed). Rows 6-7
                # (k = 3; tiles 1 and 2 hold thr): tile 0 holds 3, 2 and its third, thr +-
                # 2^-12 above thr, which pack_third's bound rounded down would lose.
                t_pos, eps = 1 + 2 ** -9, 2 ** -12
                weight = torch.full((130, 16), 0.0)
                weight[:, :6] = -5.0
                for c, (near, thr) in enumerate(((t_pos + eps, t_pos), (-t_pos + eps, -t_pos),
                                                 (t_pos - eps, t_pos), (-t_pos - eps, -t_pos))):
                    weight[5, c], weight[9, c], weight[40, c] = 3.0, near, thr
                for c, thr in ((4, t_pos), (5, -t_pos)):
                    weight[5, c], weight[9, c], weight[12, c] = 3.0, 2.0, thr + eps
                    weight[40, c] = weight[70, c] = thr
                hidden = torch.eye(16)[[0, 1, 2, 3, 0, 1, 4, 5]]
                res = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True,
                       "dtype": "float32"}
                for k, path in itertools.product((2, 3), (exact, rounded)):
                    ref = torch_topk.topk_stats(hidden, weight, None, 1 / 0.7, True, k)
                    with second_max_from(path):
                        got = triton_topk.topk_stats(hidden, weight, None, 1 / 0.7, True, k)
                    res["values_err"] = max(res["values_err"],
                                            (got[1] - ref[1]).abs().max().item())
                    res["ids_equal"] &= torch.equal(got[2], ref[2])
                    res["ids_equal"] &= torch.equal(got[2][:2, :2], torch.tensor([[5, 9]] * 2))
                    if k == 3:
                        res["ids_equal"] &= torch.equal(got[2][6:], torch.tensor([[5, 9, 12]] * 2))
                # the packed maxima themselves (pack_second, pack_third) on dyadic logits
                # with ties inside a tile (the maximum twice: it is the second too; equal
                # columns past it), per-row temperatures: the exact second largest z of
                # each (row, tile) rounded up to bfloat16 (pack_third: exact, and the third
                # rounded up), the leftmost argmax column (and the second's: the leftmost
                # of the rest)
                hidden, weight, _, inv_t = inputs(21, 16, 200, torch.float32, seed=8)
                hidden = (hidden * 4).round() / 4
                weight = (weight * 8).round() / 8
                weight[7], weight[20], weight[70] = weight[3], weight[3], weight[65]
                weight[71] = weight[65]
                seen = {}

                def spy(tile_max, k, tile_second=None, block_v=0, second_exact=None):
                    seen.update(maxima=tile_max.clone(), packed=tile_second.clone(),
                                block_v=block_v, exact=second_exact)
                    return best_tiles_kernel(tile_max, k, tile_second, block_v, second_exact)

                def leftmost(z):  # (the maximum, its leftmost column) of the last dim
                    top = z.max(dim=-1, keepdim=True).values
                    return top[..., 0], (z == top).int().argmax(dim=-1)

                def up(value):
                    bits = value.contiguous().view(torch.int32)
                    return torch.where(bits >= 0, bits + 0xFFFF, bits) & -65536

                best_tiles_kernel = topk_forward.best_tiles
                for path in (exact, rounded):
                    topk_forward.best_tiles = spy
                    try:
                        with second_max_from(path):
                            triton_topk.topk_stats(hidden, weight, None, inv_t, True, 3)
                    finally:
                        topk_forward.best_tiles = best_tiles_kernel
                    bv = seen["block_v"]
                    logits = hidden @ weight.t()
                    tiles = -(-logits.shape[1] // bv)
                    z = torch.full((logits.shape[0], tiles * bv), float("-inf"))
                    z[:, :logits.shape[1]] = logits
                    z = z.view(-1, tiles, bv) * inv_t[:, None, None]
                    top1, first = leftmost(z)
                    cols = torch.arange(bv)
                    rest = torch.where(cols == first[..., None], float("-inf"), z)
                    top2, second = leftmost(rest)
                    packed = seen["packed"].t()
                    if path == exact:
                        top3 = torch.where(cols == second[..., None], float("-inf"), rest).amax(-1)
                        res["ids_equal"] &= torch.equal(packed & 0xFF, first.int())
                        res["ids_equal"] &= torch.equal((packed >> 8) & 0xFF, second.int())
                        res["ids_equal"] &= torch.equal(packed & -65536, up(top3))
                        res["values_err"] = max(res["values_err"], (seen["exact"].t()
                                                                    - top2).abs().max().item())
                    else:
                        res["ids_equal"] &= seen["exact"] is None
                        res["ids_equal"] &= torch.equal(packed & 0xFFFF, first.int())
                        res["ids_equal"] &= torch.equal(packed & -65536, up(top2))
                    res["values_err"] = max(res["values_err"], (seen["maxima"].t()
                                                                - top1).abs().max().item())
                report[case] = res
            elif kind == "invariant":  # batch invariance of the top-k kernel
                hidden, weight, labels, _ = inputs(70, 16, 200, dtype, seed=12)
                labels[labels < 0] = -100
                # dyadic inputs: exact logits, since the interpreter's numpy dot can round a
                # row differently by its place in the tile; what must not move with N is
                # the statistics' fold and merge order (the chunks)
                hidden = ((hidden.float() * 4).round() / 4).to(dtype)
                weight = ((weight.float() * 8).round() / 8).to(dtype)
                os.environ["MEGATRON_OVERLAY_IMPL"] = "triton"

                def topk(rows, with_labels):
                    kw = dict(labels=labels[rows], return_entropy=True) if with_labels else {}
                    return linear_topk_logprobs(hidden[rows], weight, 4, temperature=0.7, **kw)

                def same(got, ref, rows):
                    return all(torch.equal(a, b[rows]) for a, b in zip(got, ref)
                               if b is not None)

                invariant = True
                perm = torch.randperm(70, generator=torch.Generator().manual_seed(3))
                for with_labels in (True, False):
                    ref = topk(slice(None), with_labels)
                    for rows in (slice(0, 1), slice(69, 70), slice(3, 10), slice(30, 63), perm):
                        invariant &= same(topk(rows, with_labels), ref, rows)
                lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=0.7)
                ref = topk(slice(None), True)
                as_logprob = torch.equal(ref.log_probs, lp) and torch.equal(ref.entropy, ent)
                # labels as a strided column (e.g. ids[:, 0]): the same bits as contiguous
                column = torch.stack([labels, labels.flip(0)], dim=1)[:, 0]
                got = linear_topk_logprobs(hidden, weight, 4, temperature=0.7, labels=column,
                                           return_entropy=True)
                strided_labels = same(got, ref, slice(None))
                os.environ.pop("MEGATRON_OVERLAY_IMPL")
                # the stage under every split count: the statistics' chunks do not move
                local = torch.where(labels < 0, -1, labels)
                by_split = [triton_topk.topk_stats(hidden, weight, local, 1 / 0.7, True, 4,
                                                   splits=s) for s in (None, 1, 2, 3, 7)]
                splits_same = all(torch.equal(a, b) for got in by_split[1:]
                                  for a, b in zip(got, by_split[0]))
                report[case] = {"stats_err": 0.0, "values_err": 0.0, "ids_equal": True,
                                "invariant": invariant, "as_logprob": as_logprob,
                                "splits_same": splits_same, "dtype": str(dtype)[6:],
                                "strided_labels": strided_labels}
            else:  # both new ops through autograd, triton vs torch
                hidden, weight, labels, inv_t = inputs(33, 32, 130, dtype, seed=11)
                labels[labels < 0] = -100
                temps = 1 / inv_t
                ids = torch.randint(0, 130, (33, 5), generator=torch.Generator().manual_seed(2))
                outs = {}
                for impl in ("torch", "triton"):
                    os.environ["MEGATRON_OVERLAY_IMPL"] = impl
                    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
                    top = linear_topk_logprobs(h, w, 6, temperature=temps, labels=labels,
                                               return_entropy=True)
                    at, ent = linear_logprobs_at(h, w, ids, temperature=temps,
                                                 return_entropy=True)
                    coef = torch.linspace(-1, 1, 33)
                    loss = ((top.topk_log_probs * coef[:, None]).sum() + top.log_probs.sum()
                            + (top.entropy * coef).sum() + (at * coef[:, None]).sum()
                            + ent.sum())
                    loss.backward()
                    outs[impl] = (top, at, ent, h.grad, w.grad)
                os.environ.pop("MEGATRON_OVERLAY_IMPL")
                t, r = outs["triton"], outs["torch"]
                values_err = max((t[0].topk_log_probs - r[0].topk_log_probs).abs().max().item(),
                                 (t[0].log_probs - r[0].log_probs).abs().max().item(),
                                 (t[0].entropy - r[0].entropy).abs().max().item(),
                                 (t[1] - r[1]).abs().max().item(),
                                 (t[2] - r[2]).abs().max().item())
                report[case] = {"stats_err": 0.0, "values_err": values_err,
                                "ids_equal": torch.equal(t[0].topk_ids, r[0].topk_ids),
                                "dh_err": rel(t[3], r[3]), "dw_err": rel(t[4], r[4]),
                                "dtype": str(dtype)[6:]}
        except Exception as e:  # reported per case, so one failure does not hide the rest
            import traceback
            report[case] = {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"}
    print("REPORT " + json.dumps(report))
    return 0


@pytest.fixture(scope="module")
def report():
    return interpreter_report(__file__, timeout_s=1200)


@pytest.mark.parametrize("case", CASES)
def test_interpreter_case(report, case):
    res = report[case]
    assert "error" not in res, res.get("error")
    assert res["ids_equal"], res
    # mixed operands: the fp32 one as hi + lo (2^-16 of each product) against fp32 products
    tol = 3e-4 if case.startswith("modes-fp32") else STATS_TOL
    assert res["stats_err"] < tol, res
    # op values: fp32 log-probs of bf16 inputs, summed in different orders
    assert res["values_err"] < (1e-4 if case.startswith("op-") else tol), res
    if "nan_rows" in res:
        assert res["nan_rows"], res
    if "fused" in res:  # the same bits as finalize's own launch, which then never ran
        assert res["fused"], res
    if "invariant" in res:  # bits whatever N, the row's position and the split count
        assert res["invariant"] and res["splits_same"], res
        assert res["as_logprob"], res  # the same bits as linear_logprob_entropy's
        assert res["strided_labels"], res
    if "dh_err" in res:
        tol = GRAD_TOL[res["dtype"]]
        assert res["dh_err"] < tol and res["dw_err"] < tol, res


if __name__ == "__main__" and "--worker" in sys.argv:
    sys.exit(_worker())
