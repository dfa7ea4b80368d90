"""Pass 29: the top-k's tail kernels by launch setting, one factor at a time, then the
best setting of each factor together against the defaults, in one process.

Part 1: for each cell (N, op) and each variant (module settings of the tail's kernels,
below), the outputs' digest (the same bits as the defaults', or not) and CUDA time by
kernel (torch.profiler, 3 calls; pass 25's tail_ab.py's helpers); a factor's variants run only in the cells where
they change a launch. Part 2: per factor, the variant with the lowest mean of (its tail
/ the defaults' tail) over the cells it ran in, the same digests required, else the
defaults; "best" = every factor's pick; defaults and best alternated in ROUNDS rounds,
single synchronized calls and bursts, x the bare GEMM of the round (8 calls each),
medians (tail_ab's timer).

    PYTHONPATH=. python docs/h200/pass29/tail_sweep.py OUT.json      (one GPU)

H = 4096, V = 151936, bf16, T = 0.7 (tools/bench/inputs.distill_inputs); $SWEEP_N: the
token counts (default 256,1024,8192), $SWEEP_ROUNDS part 2's rounds (default 5, 0: none).
"""
import json
import os
import statistics
import sys

import torch

from megatron_overlay import ops
from megatron_overlay.ops.kernels import merge_runs, merge_topk, tile_sort, topk_rescan
from tools.bench.inputs import distill_inputs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pass25"))
import tail_ab  # noqa: E402  (its digest, CUDA time by kernel (3 calls) and timer)

H, V = 4096, 151936
ROUNDS = int(os.environ.get("SWEEP_ROUNDS", 5))
TOKENS = [int(n) for n in os.environ.get("SWEEP_N", "256,1024,8192").split(",")]
ALL = 1 << 30
# factor -> {variant: {(module, setting): value}}
FACTORS = {
    "merge_runs": {
        "mx4k": {(merge_runs, "MERGE_EXTRACT_MAX_ROWS"): 4096},
        "mxall": {(merge_runs, "MERGE_EXTRACT_MAX_ROWS"): ALL},
        "mx4k_e2k": {(merge_runs, "MERGE_EXTRACT_MAX_ROWS"): 4096,
                     (merge_runs, "MERGE_EXTRACT_ELEMENTS"): 2048},
        "mx4k_e1k": {(merge_runs, "MERGE_EXTRACT_MAX_ROWS"): 4096,
                     (merge_runs, "MERGE_EXTRACT_ELEMENTS"): 1024},
        "mx4k_e8k": {(merge_runs, "MERGE_EXTRACT_MAX_ROWS"): 4096,
                     (merge_runs, "MERGE_EXTRACT_ELEMENTS"): 8192},
    },
    "best_tiles": {
        "bt_r1_w4": {(merge_topk, "BEST_TILES_ROWS"): 1, (merge_topk, "BEST_TILES_WARPS"): 4},
        "bt_r2_w4": {(merge_topk, "BEST_TILES_ROWS"): 2, (merge_topk, "BEST_TILES_WARPS"): 4},
        "bt_r4_w4": {(merge_topk, "BEST_TILES_ROWS"): 4, (merge_topk, "BEST_TILES_WARPS"): 4},
        "bt_r2_w8": {(merge_topk, "BEST_TILES_ROWS"): 2, (merge_topk, "BEST_TILES_WARPS"): 8},
        "sel8": {(merge_topk, "SELECT_MIN_K"): 8},
    },
    "select": {
        "sel_r1_w2": {(merge_topk, "SELECT_ROWS"): 1, (merge_topk, "SELECT_WARPS"): 2},
        "sel_r1_w4": {(merge_topk, "SELECT_ROWS"): 1, (merge_topk, "SELECT_WARPS"): 4},
        "sel_r2_w4": {(merge_topk, "SELECT_ROWS"): 2, (merge_topk, "SELECT_WARPS"): 4},
        "sel_r4_w4": {(merge_topk, "SELECT_ROWS"): 4, (merge_topk, "SELECT_WARPS"): 4},
    },
    "sort": {
        "lone4k": {(tile_sort, "SORT_LONE_BLOCK_MAX"): 4096},
        "lone8k": {(tile_sort, "SORT_LONE_BLOCK_MAX"): 8192},
        "sw4": {(tile_sort, "SORT_WARPS"): 4},
    },
    "rescan": {
        "st5": {(topk_rescan, "RESCAN_STAGES_SPARSE"): 5},
    },
}
# Settings this tree lacks (r1 ran the tree of 460a91d, which had every one; the dropped
# ones were removed after it: tile_sort.SORT_LONE_BLOCK_MAX, and merge_topk's
# BEST_TILES_ROWS / BEST_TILES_WARPS, which became BEST_TILES_ROW_TOKENS' rule): their
# variants are skipped.
SETTINGS = {key for variants in FACTORS.values() for v in variants.values() for key in v
            if hasattr(*key)}
DEFAULTS = {key: getattr(*key) for key in SETTINGS}


def applies(factor, n, k):
    """The cells where a factor's variants change a launch."""
    if factor == "best_tiles":
        return k < merge_topk.SELECT_MIN_K
    if factor == "select":
        return k >= merge_topk.SELECT_MIN_K
    if factor == "rescan":  # the sparse path (topk_forward._second_max)
        return k >= 32 or n <= 4096
    return True


def use(settings):
    for (module, name), value in {**DEFAULTS, **settings}.items():
        setattr(module, name, value)


def ops_for(n):
    h, w, ids = distill_inputs(n, H, V, 32, 0)
    labels = ids[:, 0].contiguous()
    calls = {"topk8": (8, lambda: ops.linear_topk_logprobs(h, w, 8, temperature=0.7))}
    if n != 4096:  # 4096: the sparse path's last N at k = 8
        calls["topk32"] = (32, lambda: ops.linear_topk_logprobs(h, w, 32, temperature=0.7))
    if n <= 1024:
        calls["topk8_labels"] = (8, lambda: ops.linear_topk_logprobs(
            h, w, 8, temperature=0.7, labels=labels, return_entropy=True))
    return (h, w), calls


def by_kernel(fn):
    """CUDA time by kernel, us a call (tail_ab's: 3 calls)."""
    return {name: round(ms * 1e3, 2) for name, ms in tail_ab.by_kernel(fn).items()}


def tail_us(kernels):
    return sum(v for name, v in kernels.items() if "topk_stats" not in name)


def part1():
    rows = []
    for n in TOKENS:
        _, calls = ops_for(n)
        with torch.no_grad():
            for op, (k, fn) in calls.items():
                use({})
                fn()
                base = {"N": n, "op": op, "variant": "defaults", "digest": tail_ab.digest(fn()),
                        "kernels_us": by_kernel(fn)}
                rows.append(base)
                print(f"N={n} {op} defaults {base['digest']} tail "
                      f"{tail_us(base['kernels_us']):.1f}", json.dumps(base["kernels_us"]),
                      flush=True)
                for factor, variants in FACTORS.items():
                    use({})  # applies() reads the defaults
                    if not applies(factor, n, k):
                        continue
                    for name, settings in variants.items():
                        if not set(settings) <= SETTINGS:
                            continue
                        use(settings)
                        try:
                            fn()
                            row = {"N": n, "op": op, "factor": factor, "variant": name,
                                   "digest": tail_ab.digest(fn()), "kernels_us": by_kernel(fn)}
                        except Exception as e:  # noqa: BLE001 (a setting that fails: recorded)
                            row = {"N": n, "op": op, "factor": factor, "variant": name,
                                   "error": repr(e)[:300]}
                            print(f"N={n} {op} {name} ERROR {row['error']}", flush=True)
                            rows.append(row)
                            continue
                        rows.append(row)
                        same = row["digest"] == base["digest"]
                        print(f"N={n} {op} {name} {row['digest']}{'' if same else ' DIFFERS'} "
                              f"tail {tail_us(row['kernels_us']):.1f}",
                              json.dumps(row["kernels_us"]), flush=True)
        use({})
        del calls
        torch.cuda.empty_cache()
        with open(sys.argv[1], "w") as f:  # so far (a call cut short keeps them)
            json.dump({"part1": rows}, f)
    return rows


def picks(rows):
    base = {(r["N"], r["op"]): r for r in rows if r["variant"] == "defaults"}
    chosen, report = {}, {}
    for factor, variants in FACTORS.items():
        scores = {}
        for name in variants:
            mine = [r for r in rows if r.get("variant") == name]
            if not mine or any("error" in r or r["digest"] != base[r["N"], r["op"]]["digest"]
                               for r in mine):
                continue
            scores[name] = statistics.mean(
                tail_us(r["kernels_us"]) / tail_us(base[r["N"], r["op"]]["kernels_us"])
                for r in mine)
        report[factor] = {k: round(v, 4) for k, v in scores.items()}
        best = min(scores, key=scores.get, default=None)
        if best is not None and scores[best] < 1.0:
            chosen.update(variants[best])
            report[factor]["pick"] = best
    print("picks", json.dumps(report), flush=True)
    return chosen, report


def part2(best):
    rows = []
    variants = {"defaults": {}, "best": best}
    for n in [n for n in TOKENS if n <= 1024]:
        (h, w), calls = ops_for(n)
        gemm = lambda: torch.matmul(h, w.T)  # noqa: E731
        gemm()
        per = {}
        with torch.no_grad():
            for _, fn in calls.values():
                for settings in variants.values():
                    use(settings)
                    fn()
            for _ in range(ROUNDS):
                floor = {s: tail_ab.timed(gemm, s) for s in (False, True)}
                for op, (_, fn) in calls.items():
                    for vname, settings in variants.items():
                        use(settings)
                        for s in (False, True):
                            per.setdefault((op, vname, s), []).append(tail_ab.timed(fn, s) / floor[s])
        use({})
        for op in calls:
            row = {"N": n, "op": op}
            for vname in variants:
                row[vname] = [round(statistics.median(per[op, vname, s]), 4) for s in (False, True)]
            rows.append(row)
            print(f"N={n} {op}: bursts / sync x GEMM: defaults {row['defaults']}, "
                  f"best {row['best']}", flush=True)
        del calls, h, w
        torch.cuda.empty_cache()
    return rows


def main():
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    out["part1"] = rows = part1()
    best, out["picks"] = picks(rows)
    out["best"] = {f"{m.__name__.rsplit('.', 1)[-1]}.{s}": v for (m, s), v in best.items()}
    print("best", json.dumps(out["best"]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    if ROUNDS:
        out["part2"] = part2(best)
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
