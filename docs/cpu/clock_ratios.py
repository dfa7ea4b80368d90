"""A distill run's forwards by time, clock cycles and energy, each over the GEMM floor's.

On a power-capped GPU (H100 SXM / H200 at 700 W) the board power sits at the limit under
all of these kernels and the SM clock is what gives: a kernel that spends part of its
cycles off the tensor cores (an epilogue's exponentials) draws less power a cycle and runs
at a higher clock. Time over the floor's is then close to energy over the floor's, and
cycles over the floor's (ms x MHz) is what the kernel's schedule costs at one clock.

    python docs/cpu/clock_ratios.py RESULTS.json      (a `tools.bench distill` run's)

Prints, per shape and forward method (bursts, medians over the rounds): ms, SM MHz, W,
and ms, cycles and energy (ms x W) over the floor's. The rounds' medians, not paired per
round: a guide to where the time goes, beside the table's paired ratios.
"""
import json
import sys


def main(path):
    run = json.load(open(path))
    floors = {}
    print(f"{run.get('device')}, {run.get('date')}: bursts, medians over {run.get('rounds')} "
          f"rounds")
    print(f"{'N,H,V':>20} {'method':>16} {'ms':>9} {'MHz':>6} {'W':>5}  "
          f"{'time x':>7} {'cycles x':>8} {'energy x':>8}")
    for r in run["results"]:
        shape = ",".join(map(str, r["shape"]))
        if r.get("method") == "gemm":
            floors[shape] = r
            rows = [("gemm", r)]
        elif "k" in r:
            rows = [(f"{name}@{r['k']}", rec) for name, rec in r.items()
                    if isinstance(rec, dict) and not name.endswith("_fb") and "ms" in rec]
        else:
            continue
        floor = floors.get(shape)
        for name, rec in rows:
            if floor is None or not rec.get("sm_mhz") or not floor.get("sm_mhz"):
                continue
            time_x = rec["ms"] / floor["ms"]
            cycles_x = time_x * rec["sm_mhz"] / floor["sm_mhz"]
            energy_x = time_x * rec["watts"] / floor["watts"] if rec.get("watts") else None
            print(f"{shape:>20} {name:>16} {rec['ms']:9.3f} {rec['sm_mhz']:6.0f} "
                  f"{rec.get('watts') or 0:5.0f}  {time_x:7.3f} {cycles_x:8.3f} "
                  f"{'' if energy_x is None else format(energy_x, '8.3f')}")


if __name__ == "__main__":
    main(sys.argv[1])
