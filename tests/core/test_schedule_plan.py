"""The build_schedule_plan path (combined 1F1B / EP A2A overlap) with an output processor,
against the plain forward, on 2 GPUs: an MoE GPTModel at EP = 2, 3 micro-batches through
megatron's get_forward_backward_func(), per processor (none, "fused_ce_loss",
"fused_logprob"). The ranks run in tests/support/multi_gpu_worker.py (mode schedule_plan),
which sets moe_utils' TE-only names to None where the core leaves them undefined (0.14-0.15
without Transformer Engine), as 0.19.2 does.
"""

from __future__ import annotations

import pytest
import torch

from ..support.multi_gpu_worker import launch

pytestmark = pytest.mark.gpu

if torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA GPUs (NCCL)", allow_module_level=True)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    from megatron.core.models.gpt import GPTModel

    if not hasattr(GPTModel, "build_schedule_plan"):
        pytest.skip("this core has no build_schedule_plan (0.14+)")
    ranks = launch("schedule_plan", tmp_path_factory.mktemp("schedule_plan"))
    report = ranks[0]
    print(f"schedule plan {report['megatron_core']}: TE names defined as None: "
          f"{report['te_names_defined_as_none']}")
    for processor, row in report["processors"].items():  # pytest -s
        print(f"schedule plan {report['megatron_core']} {processor}: plain {row['plain']} | "
              f"plan {row['plan']} | out {row.get('output_max_abs')} grad rel "
              f"{row.get('grad_max_rel')} ({row.get('n_grads')} grads)")
    return [rank["processors"] for rank in ranks]


@pytest.mark.parametrize("processor", [None, "fused_ce_loss"])
def test_plan_equals_plain(ranks, processor):
    for rows in ranks:
        row = rows[processor]
        assert row["plain"] == "ran" and row["plan"] == "ran", row
        assert row["microbatches"] == 3 and row["n_grads"] == 26
        assert row["output_max_abs"] == 0 and row["grad_max_rel"] == 0, row


def test_fused_logprob_plan_fails_in_make_viewless(ranks):
    """The schedule plan passes node outputs on as tensors; ScheduleNode's make_viewless
    fails on fused_logprob's output object. When this fails, the path works: compare it."""
    for rows in ranks:
        row = rows["fused_logprob"]
        assert row["plain"] == "ran", row
        assert row["plan"].startswith("AttributeError: ") and row["plan"].endswith(
            "object has no attribute 'requires_grad'"), row["plan"]
        assert "make_viewless" in row["plan_traceback"], row["plan_traceback"]
