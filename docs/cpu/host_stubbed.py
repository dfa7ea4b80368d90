"""The ops' own host Python on the CPU machine: the Triton stages with every launch stubbed.

A small call's host time is Triton's launches plus the ops' and stages' own Python and
torch calls. Only the second part runs without a GPU: here the Triton stages run on CPU
tensors (``TRITON_INTERPRET=1`` lets them take CPU tensors; ``MEGATRON_OVERLAY_IMPL=triton``
picks them), every ``launch`` a no-op, and the CPU-only eager label check left out (on CUDA
the check runs inside the kernels). Not a GPU host's figure (its torch calls on CUDA cost
more): a way to compare two trees' or two settings' own Python on one machine.

    python docs/cpu/host_stubbed.py [--profile N]

Prints, for the log-prob forward, top-k (k = 8) and at ids (k = 8) at N = 256, H = 512,
V = 4096, bf16: us a call and us to the first launch with the options' cache off (each
call's options built afresh, ``LogprobParams(...)``, as the ops did before pass 24) and
on, medians of 15 rounds of 200 calls, the two settings alternated in each round (this
machine's speed drifts by 2x between runs); ``--profile N``: the N functions of most own
time with the cache on, us a call (cProfile, 500 calls).
"""
import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ["MEGATRON_OVERLAY_IMPL"] = "triton"

import torch  # noqa: E402

from megatron_overlay import ops  # noqa: E402
from megatron_overlay.ops import label_check  # noqa: E402
from megatron_overlay.ops.kernels import triton_impl, triton_topk  # noqa: E402,F401
from megatron_overlay.ops.params import LogprobParams  # noqa: E402

_first = [None]


def stub_launches():
    def stub(kernel, grid, *args, **constexprs):
        if _first[0] is None:
            _first[0] = time.perf_counter()
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron_overlay.ops.kernels.") and hasattr(module, "launch"):
            module.launch = stub
    # on CPU the ops check labels and ids eagerly (on CUDA: inside the kernels)
    label_check.check_eagerly = lambda *a, **k: None
    label_check.check_ids_eagerly = lambda *a, **k: None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", type=int, default=0)
    args = parser.parse_args()
    settings = {"off": classmethod(lambda cls, **options: cls(**options)),
                "on": LogprobParams.__dict__["of"]}
    stub_launches()
    torch.manual_seed(0)
    n, h, v = 256, 512, 4096
    hidden = torch.randn(n, h).bfloat16()
    weight = torch.randn(v, h).bfloat16()
    labels = torch.randint(0, v, (n,))
    ids = torch.randint(0, v, (n, 8))
    calls = {
        "log-prob fwd": lambda: ops.linear_logprob_entropy(hidden, weight, labels,
                                                           temperature=0.7),
        "top-k k=8": lambda: ops.linear_topk_logprobs(hidden, weight, 8, temperature=0.7),
        "at ids k=8": lambda: ops.linear_logprobs_at(hidden, weight, ids, temperature=0.7),
    }
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        total = {key: [] for key in settings}
        before = {key: [] for key in settings}
        for r in range(15):
            for key in (("off", "on") if r % 2 == 0 else ("on", "off")):
                LogprobParams.of = settings[key]
                t_sum = first_sum = 0.0
                for _ in range(200):
                    _first[0] = None
                    t0 = time.perf_counter()
                    fn()
                    t_sum += time.perf_counter() - t0
                    first_sum += _first[0] - t0
                total[key].append(t_sum / 200 * 1e6)
                before[key].append(first_sum / 200 * 1e6)
        print(f"{name}: " + "; ".join(
            f"cache {key} {statistics.median(total[key]):.1f} us a call, "
            f"{statistics.median(before[key]):.1f} us to the first launch" for key in settings))
        LogprobParams.of = settings["on"]
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(500):
                fn()
            prof.disable()
            rows = sorted(pstats.Stats(prof).stats.items(), key=lambda kv: -kv[1][2])
            for (path, line, func), (_, calls_n, own, incl, _) in rows[:args.profile]:
                print(f"  {own / 500 * 1e6:6.2f} {incl / 500 * 1e6:7.2f} {calls_n / 500:5.1f} "
                      f"{os.path.basename(path)}:{line}({func})")


if __name__ == "__main__":
    main()
