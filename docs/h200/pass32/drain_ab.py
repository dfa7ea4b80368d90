"""Pass 32: does a burst's host time include reading the label records an earlier burst left?

Each call of an op with labels or ids queues one label-check record, which a later call's
poll reads once the GPU has written it (ops/label_check.py; at most MAX_PENDING = 256 wait
unread). The one-run table's host column times a burst's first 8 calls after a sync
(tools/bench/timing.py); the burst before it (another method's, of ~500 calls at 256
tokens) leaves up to 256 finished records, which the first call's poll reads. In pass
32's r1 and r2 on one H100 host, a burst's host time a call at 256 tokens was 0.137 ms
(host_ab.py: calls of one op, one record pending) against 0.34 ms (the table) for the
log-prob op, 0.231 against 0.47 for the top-k at k = 8.

For each op at N = 256 (H = 4096, V = 151936, bf16, T = 0.7; host_ab.py's calls), ROUNDS
rounds of: a burst of FILL log-prob calls and a sync (leaving records pending), then the
op's first 8 calls' host time a call (timing.burst) as they come; again, with the pending
records read first (``check_labels()``, timed apart, with their count). Medians, us.

    PYTHONPATH=. python docs/h200/pass32/drain_ab.py OUT.txt      (one GPU)

($DRAIN_ROUNDS, default 7; $DRAIN_FILL, default 300.)
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pass28"))
from host_ab import op_calls  # noqa: E402

from megatron_overlay import ops  # noqa: E402
from megatron_overlay.ops import label_check  # noqa: E402
from tools.bench import timing  # noqa: E402
from tools.bench.inputs import distill_inputs  # noqa: E402

ROUNDS = int(os.environ.get("DRAIN_ROUNDS", 7))
FILL = int(os.environ.get("DRAIN_FILL", 300))


def main():
    out = open(sys.argv[1], "w")

    def say(text):
        print(text, flush=True)
        out.write(text + "\n")

    h, w, ids = distill_inputs(256, 4096, 151936, 32, 0)
    calls = op_calls(ops, h, w, ids)
    fill = calls["logprob"]
    for name in ("logprob", "topk8", "at8", "topk1"):
        for _ in range(3):
            calls[name]()
    ops.check_labels()
    for name in ("logprob", "topk8", "at8", "topk1"):
        fn = calls[name]
        left, read, drain, pending = [], [], [], []
        for _ in range(ROUNDS):
            timing.burst(lambda _i: fill(), [(0,)], FILL)
            timing.burst(lambda _i: fn(), [(0,)], timing.HOST_CALLS, host=left)
            timing.burst(lambda _i: fill(), [(0,)], FILL)
            pending.append(len(label_check._pending))
            t0 = time.perf_counter()
            ops.check_labels()
            drain.append((time.perf_counter() - t0) * 1e6)
            timing.burst(lambda _i: fn(), [(0,)], timing.HOST_CALLS, host=read)
        say(f"{name}: first {timing.HOST_CALLS} calls' host a call: "
            f"{statistics.median(left) * 1e3:.1f} us with the records left, "
            f"{statistics.median(read) * 1e3:.1f} us with them read before "
            f"(check_labels(): {statistics.median(drain):.1f} us for "
            f"{statistics.median(pending):.0f} records)")


if __name__ == "__main__":
    main()
