"""The fused op's chunked torch path against materialized logits, on the CPU.

For growing N (tokens) and V (vocab; fp32, H=256), forward and forward+backward: the median
of single calls (host clock), then the peak of torch's allocator above the inputs in one
more, untimed call (``PeakTensorMemory``: it repeats exactly, where the process's RSS,
read before, moved with what malloc kept), each measurement in a fresh process. Writes
results.json (the rows of docs/bench_cpu_logprob.json) and table.md (the table of
docs/BENCHMARKS.md).

    python -m tools.bench cpu --out out/cpu
    python -m tools.bench cpu --shapes 64,512 --rounds 1 --out out/tiny
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import torch

from megatron_overlay.utils.memory import PeakTensorMemory

from .inputs import shape
from .methods import Materialized, Ours
from .report import Run, markdown
from .timing import interleaved

SHAPES = "1024,8192;1024,32768;1024,131072;4096,32768;8192,32768"
HIDDEN = 256


def add_arguments(p):
    p.add_argument("--shapes", default=SHAPES, help="N,V[;N,V...]")
    p.add_argument("--rounds", "--repeats", type=int, default=3)
    p.add_argument("--one", nargs=4, metavar=("N", "V", "METHOD", "BACKWARD"),
                   help="one measurement, in this process (what each fresh process runs)")


def measure(n: int, vocab: int, method: str, backward: bool, rounds: int) -> dict:
    torch.manual_seed(0)
    hidden = torch.randn(n, HIDDEN)
    weight = torch.randn(vocab, HIDDEN) / HIDDEN ** 0.5
    labels, ones = torch.randint(0, vocab, (n,)), torch.ones(n)
    m = {"fused": Ours, "materialized": Materialized}[method]()
    # backward: of sum(logprob + entropy)
    inputs = [(hidden, weight, labels, ones, ones) if backward else (hidden, weight, labels)]
    fn = m.fb if backward else m.fwd
    with torch.set_grad_enabled(backward):
        got = interleaved({method: fn}, inputs, rounds, single=True, heat_s=0,
                          warmup_calls=0, cuda=False)[method]
        with PeakTensorMemory("cpu") as peak:  # under torch's profiler: not timed
            fn(*inputs[0])
    return {"n": n, "vocab": vocab, "method": method, "backward": backward,
            "ms": got.median_ms, "peak_mib": peak.extra_bytes / 2 ** 20}


def table(rows) -> str:
    cells = []
    for fused, mat in zip(rows[::2], rows[1::2]):
        cells.append((fused["n"], fused["vocab"], "fwd+bwd" if fused["backward"] else "fwd",
                      f"{fused['ms']:.0f}", f"{mat['ms']:.0f}", f"{fused['peak_mib']:.0f}",
                      f"{mat['peak_mib']:.0f}", f"{fused['n'] * fused['vocab'] * 4 / 2**20:.0f}"))
    return markdown(("N", "V", "pass", "fused ms", "materialized ms", "fused peak MiB",
                     "materialized peak MiB", "logits fp32 MiB"), cells)


def main(args, argv) -> int:
    if args.one:
        n, v, method, backward = args.one
        print(json.dumps(measure(int(n), int(v), method, backward == "1", args.rounds)))
        return 0
    run = Run(args, argv)
    rows = []
    for n, vocab in (shape(s) for s in args.shapes.split(";")):
        for backward in (False, True):
            for method in ("fused", "materialized"):
                out = subprocess.run(
                    [sys.executable, "-m", "tools.bench", "cpu", "--one", str(n), str(vocab),
                     method, "1" if backward else "0", "--rounds", str(args.rounds)],
                    capture_output=True, text=True, check=True)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                run.log(json.dumps(rows[-1]))
    run.write("results.json", {"machine": platform.processor() or platform.machine(),
                               "rows": rows})
    (run.out / "table.md").write_text(table(rows) + "\n")
    run.log(table(rows))
    return 0
