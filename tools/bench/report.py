"""What a run leaves: its folder, log and JSON; markdown tables; the op's figure."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .inputs import TEMPERATURE


class Run:
    """A subcommand's output folder, its log (printed and appended to log.txt) and the
    run's metadata."""

    def __init__(self, args, argv):
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._log = open(self.out / "log.txt", "a")
        cuda = getattr(args, "device", "cuda") == "cuda" and torch.cuda.is_available()
        self.meta = {"device": torch.cuda.get_device_name() if cuda else
                     "cpu (host-clock timings)", "torch": torch.__version__,
                     "temperature": TEMPERATURE,
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "argv": list(argv)}

    def log(self, msg: str) -> None:
        print(msg, flush=True)
        self._log.write(msg + "\n")
        self._log.flush()

    def write(self, name: str, data) -> None:
        (self.out / name).write_text(json.dumps(data, indent=1) + "\n")


def markdown(head, rows) -> str:
    """A markdown table: ``head`` the column names, ``rows`` lists of cell strings."""
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                      + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def _fmt(x, f):
    return "" if x is None else format(x, f)


def _ratio(r, phase, key="x"):
    """"x (lo-hi)" from {phase}_x/_x_min/_x_max or a list {phase}_vs_base = [x, lo, hi]."""
    got = r.get(f"{phase}_{key}")
    lo, hi = (r.get(f"{phase}_x_min"), r.get(f"{phase}_x_max")) if key == "x" else (None, None)
    if isinstance(got, list):
        got, lo, hi = got
    if got is None:
        return ""
    return f"{got:.3f} ({lo:.3f}-{hi:.3f})" if lo is not None else f"{got:.3f}"


def table(rows):
    methods = {r["method"] for r in rows}
    head = ("N, H, V", "method", "outputs", "fwd ms", "fb ms", "fwd x GEMM (rounds' range)",
            "fb x 3 GEMMs (range)", "fwd peak GiB", "fb peak GiB", "logprob err", "entropy err",
            "SM MHz fwd / fb", "fwd / fb x base (range)", "fb extra GiB", "invariant rows",
            "logprob mean err", "mult. err vs fp32 head", "fwd / fb x GEMM, sync calls")
    return markdown(head, [
        (f"{r['N']}, {r['H']}, {r['V']}", r["method"], r["outputs"],
         _fmt(r.get("fwd_ms"), ".2f"), _fmt(r.get("fb_ms"), ".2f"), _ratio(r, "fwd"),
         _ratio(r, "fb"), _fmt(r.get("fwd_peak_gib"), ".3f"), _fmt(r.get("fb_peak_gib"), ".2f"),
         _fmt(r.get("lp_err"), ".1e"), _fmt(r.get("ent_err"), ".1e"),
         f"{_fmt(r.get('fwd_sm_mhz'), '.0f')} / {_fmt(r.get('fb_sm_mhz'), '.0f')}",
         " / ".join(_ratio(r, p, "vs_base") for p in ("fwd", "fb")) if "base" in methods else "",
         _fmt(r.get("fb_extra_gib"), ".3f"), _fmt(r.get("invariant_rows"), "d"),
         _fmt(r.get("lp_mean_err"), ".1e"), _fmt(r.get("mult_err"), ".1e"),
         " / ".join(_ratio(r, p, "sync_x") for p in ("fwd", "fb")) if any(
             "fwd_sync_x" in x or "fb_sync_x" in x for x in rows) else "")
        for r in rows])


def plot(rows, path, title="fused log-prob + entropy"):
    """Per shape: time (forward; forward + backward) and peak extra memory of every method,
    each relative to the GEMM floor's of the same shape and run. Whiskers: the range of the
    per-round ratios."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shapes = list(dict.fromkeys((r["N"], r["H"], r["V"]) for r in rows))
    names = [m for m in dict.fromkeys(r["method"] for r in rows) if m != "gemm"]
    fig, axes = plt.subplots(2, len(shapes), figsize=(5.2 * len(shapes), 8), squeeze=False)
    width = 0.38
    for col, shape in enumerate(shapes):
        by = {r["method"]: r for r in rows if (r["N"], r["H"], r["V"]) == shape}
        floor_peak = by.get("gemm", {})
        ax_t, ax_m = axes[0][col], axes[1][col]
        for off, phase, color, label in ((-width / 2, "fwd", "C0", "forward"),
                                         (width / 2, "fb", "C1", "forward + backward")):
            bars = [(x + off, by[m][f"{phase}_x"], by[m].get(f"{phase}_x_min"),
                     by[m].get(f"{phase}_x_max")) for x, m in enumerate(names)
                    if by.get(m, {}).get(f"{phase}_x") is not None]
            if bars:
                pos, ys, lo, hi = zip(*bars)
                err = [[y - (a if a is not None else y) for y, a in zip(ys, lo)],
                       [(b if b is not None else y) - y for y, b in zip(ys, hi)]]
                ax_t.bar(pos, ys, width, yerr=err, capsize=2, color=color, label=label)
                for x, y in zip(pos, ys):
                    ax_t.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=6)
            ref = floor_peak.get(f"{phase}_peak_gib")
            mem = [(x + off, max(by[m][f"{phase}_peak_gib"] / ref, 1e-4))
                   for x, m in enumerate(names)
                   if ref and by.get(m, {}).get(f"{phase}_peak_gib") is not None]
            if mem:
                ax_m.bar(*zip(*mem), width, color=color, label=label)
        ax_t.set_title(f"N={shape[0]}, H={shape[1]}, V={shape[2]}: time / GEMM floor")
        ax_m.set_yscale("log")
        ax_m.set_title("peak extra memory / GEMM floor's (log)")
        for ax in (ax_t, ax_m):
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
