#!/usr/bin/env python3
"""CPU benchmark: the fused op's chunked torch path vs materialized logits.

For growing N (tokens) and V (vocab), forward (log-prob + entropy) and forward+backward:
median wall time, and peak memory above the inputs (the process's peak RSS, each
measurement in a fresh process because RSS peaks never go down). fp32, H=256, T=0.7.

    python tools/bench_cpu_logprob.py                 # prints a table, writes JSON
    python tools/bench_cpu_logprob.py --markdown      # the table as docs/BENCHMARKS.md has it
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPES = [(1024, 8192), (1024, 32768), (1024, 131072), (4096, 32768), (8192, 32768)]
HIDDEN = 256
TEMPERATURE = 0.7
REPEATS = 3


def measure(n: int, vocab: int, method: str, backward: bool) -> dict:
    """One measurement, in this process (call through a fresh subprocess)."""
    import torch

    from megatron_overlay.ops import linear_logprob_entropy
    from megatron_overlay.utils.memory import PeakMemory

    torch.manual_seed(0)
    hidden = torch.randn(n, HIDDEN, requires_grad=backward)
    weight = (torch.randn(vocab, HIDDEN) / HIDDEN ** 0.5).requires_grad_(backward)
    labels = torch.randint(0, vocab, (n,))

    def run():
        if method == "fused":
            lp, ent = linear_logprob_entropy(hidden, weight, labels, temperature=TEMPERATURE)
        else:
            logp = torch.log_softmax((hidden @ weight.T).float() / TEMPERATURE, dim=-1)
            lp = logp.gather(1, labels[:, None]).squeeze(1)
            ent = -(logp.exp() * logp).sum(-1)
        if backward:
            (lp.sum() + ent.sum()).backward()
            hidden.grad = weight.grad = None

    times = []
    with torch.set_grad_enabled(backward), PeakMemory("cpu") as peak:
        for _ in range(REPEATS):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return {"n": n, "vocab": vocab, "method": method, "backward": backward,
            "ms": statistics.median(times) * 1e3, "peak_mib": peak.extra_bytes / 2 ** 20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=4, metavar=("N", "V", "METHOD", "BACKWARD"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=REPO / "docs" / "bench_cpu_logprob.json")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.one:
        n, v, method, backward = args.one
        print(json.dumps(measure(int(n), int(v), method, backward == "1")))
        return

    rows = []
    for n, vocab in SHAPES:
        for backward in (False, True):
            for method in ("fused", "materialized"):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(n), str(vocab), method,
                     "1" if backward else "0"], capture_output=True, text=True, check=True,
                    cwd=REPO)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(rows[-1], flush=True)
    args.json.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                     "rows": rows}, indent=1) + "\n")
    print("\n| N | V | pass | fused ms | materialized ms | fused peak MiB | "
          "materialized peak MiB | logits fp32 MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for i in range(0, len(rows), 2):
        fused, mat = rows[i], rows[i + 1]
        print(f"| {fused['n']} | {fused['vocab']} | {'fwd+bwd' if fused['backward'] else 'fwd'} "
              f"| {fused['ms']:.0f} | {mat['ms']:.0f} | {fused['peak_mib']:.0f} | "
              f"{mat['peak_mib']:.0f} | {fused['n'] * fused['vocab'] * 4 / 2**20:.0f} |")


if __name__ == "__main__":
    main()
