"""fused_logprob on a GPTModel at TP = 2 (shards gathered) against TP = 1 on the same
weights, SP off/on x tied/untied: log-probs, entropy and every parameter's gradient.

CPU (gloo, fp32, the builder's tiny model) always; CUDA (NCCL, bf16, vocab 32000, hidden
1024, 2 layers, 8 heads, 4 x 1024 tokens) with 2 GPUs. The ranks run in
tests/support/multi_gpu_worker.py (mode tp_vs_tp1); ``pytest -s`` prints the numbers of
docs/BENCHMARKS.md's tables.
"""

from __future__ import annotations

import pytest
import torch

from ..support.multi_gpu_worker import launch

# (log-probs abs, entropy abs, worst gradient relative to its max). Measured: fp32 5e-7 to
# 1e-6 / 6e-7; bf16 (rounding in the model's layers) 2.4e-2, 6e-4 / 1.2e-2.
TOL = {"cpu": (1e-5, 1e-5, 1e-5), "cuda": (6e-2, 3e-3, 3e-2)}
GRADS = {"tied": 27, "untied": 28}  # every parameter of the 2-layer model
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (NCCL)")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, two_gpus])])
def test_tp2_matches_tp1(device, tmp_path):
    ranks = launch("tp_vs_tp1", tmp_path, device)
    for name, row in ranks[0].items():  # pytest -s
        print(f"TP=2 vs TP=1 {device} {name}: log-probs {row['log_probs']:.1e} entropy "
              f"{row['entropy']:.1e} grad abs {row['grad_abs']:.1e} rel {row['grad_rel']:.1e} "
              f"({row['n_grads']} grads)")
    lp_tol, ent_tol, grad_tol = TOL[device]
    for report in ranks:
        assert sorted(report) == sorted(f"tp2-sp{s}-{t}" for s in (0, 1) for t in GRADS)
        for name, row in report.items():
            assert row["n_grads"] == GRADS[name.split("-")[-1]], name
            assert row["log_probs"] < lp_tol and row["entropy"] < ent_tol, (name, row)
            assert row["grad_rel"] < grad_tol, (name, row)
