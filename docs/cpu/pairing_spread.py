"""Two pairings of one run's bursts, by their spread over the rounds (CPU, from a stored run).

Pass 20's runs (docs/h200/pass20/h100/r2) ran the GEMM floor's burst before every method's
and after the last. Each method's stored ``x_floor`` pairs a burst with the mean of the
two floor bursts around it; its ``ms_rounds`` and the floor's (the median of the round's
floor bursts) give the other pairing: each round's ratio over that median. Per cell at
the shapes of >= 8192 tokens (both phases), the median over the rounds and the range
(max - min) of each; then the median range of each.

    python docs/cpu/pairing_spread.py docs/h200/pass20/h100/r2/distill/results.json
"""
import json
import statistics
import sys


def main(path):
    run = json.load(open(path))
    floor, cells = {}, []
    for r in run["results"]:
        if "method" in r:
            floor[tuple(r["shape"]), r["method"]] = r["ms_rounds"]
            continue
        for name, rec in r.items():
            if isinstance(rec, dict) and "x_floor" in rec and r["shape"][0] >= 8192:
                cells.append((tuple(r["shape"]), name, r["k"], rec))
    spreads = {"around": [], "median": []}
    print(f"{'N':>6} {'method':>16} {'k':>3}  {'around it':>22}  {'round median':>22}")
    for shape, name, k, rec in cells:
        ref = floor[shape, "gemm_fb" if name.endswith("_fb") else "gemm"]
        per_round = [a / b for a, b in zip(rec["ms_rounds"], ref)]
        around = (rec["x_floor"], rec["x_floor_min"], rec["x_floor_max"])
        median = (statistics.median(per_round), min(per_round), max(per_round))
        spreads["around"].append(around[2] - around[1])
        spreads["median"].append(median[2] - median[1])
        print(f"{shape[0]:>6} {name:>16} {k:>3}  {around[0]:.3f} [{around[1]:.3f}-"
              f"{around[2]:.3f}]  {median[0]:.3f} [{median[1]:.3f}-{median[2]:.3f}]")
    print(f"median range over the rounds, {len(cells)} cells: the floor bursts around it "
          f"{statistics.median(spreads['around']):.4f}, the round's median floor "
          f"{statistics.median(spreads['median']):.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
