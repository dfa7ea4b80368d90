"""The back-ported hook is megatron-core 0.18.0's: signature, placement, kwargs, results.

Each test-matrix leg runs these against its own core: a patched pre-0.18 release, or a
native 0.18+ release with the overlay's name lookup.
"""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys

import pytest

from megatron_overlay import has_output_processor, patching, require_output_processor

from ..support.processors_018 import HOOK_KWARGS_018
from .conftest import REPO, run_worker


def _gpt_model():
    from megatron.core.models.gpt import GPTModel

    return GPTModel


def _params(func):
    return inspect.signature(func).parameters


def test_forward_takes_the_hook_as_keyword_only_parameters():
    params = _params(_gpt_model().forward)
    names = list(params)
    assert names[-2:] == ["output_processor", "output_processor_context"]
    for name in names[-2:]:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].default is None
    assert "Callable" in str(params["output_processor"].annotation)
    assert "Any" in str(params["output_processor_context"].annotation)


def test_postprocess_and_schedule_plan_carry_the_hook_like_018():
    gpt = _gpt_model()
    if hasattr(gpt, "_postprocess"):
        params = _params(gpt._postprocess)
        assert list(params)[-2:] == ["output_processor", "output_processor_context"]
        assert all(params[n].default is None for n in list(params)[-2:])
    if hasattr(gpt, "build_schedule_plan"):  # 0.14+: the combined-1F1B / EP-overlap path
        from megatron.core.models.common.model_chunk_schedule_plan import (
            TransformerModelChunkSchedulePlan,
        )
        try:
            from megatron.core.models.gpt.fine_grained_callables import PostProcessNode
        except ImportError:  # 0.19 moved it
            from megatron.core.models.common.utils import PostProcessNode

        for func in (gpt.build_schedule_plan, TransformerModelChunkSchedulePlan.__init__):
            params = _params(func)
            assert list(params)[-2:] == ["output_processor", "output_processor_context"]
            assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY
                       for n in list(params)[-2:])
        plan_src = inspect.getsource(TransformerModelChunkSchedulePlan.__init__)
        assert "self._model_chunk_state.output_processor = output_processor" in plan_src
        node_src = inspect.getsource(PostProcessNode.forward_impl)
        assert "output_processor=self.chunk_state.output_processor," in node_src
        assert "output_processor_context=self.chunk_state.output_processor_context," in node_src


def test_probe_accepts_the_patched_model():
    holder = type("Holder", (), {})()
    holder.forward = functools.partial(_gpt_model().forward, None)  # bound-like: no `self`
    assert has_output_processor(holder)
    require_output_processor(holder)


def test_probe_names_core_state_and_fix_when_the_hook_is_missing(trees):
    if patching.status(trees["upstream"]).state == patching.NATIVE:
        pytest.skip("the upstream form of a native core has the hook")
    script = (
        "import functools\n"
        "from megatron.core.models.gpt import GPTModel\n"
        "from megatron_overlay import require_output_processor\n"
        "h = type('H', (), {})(); h.forward = functools.partial(GPTModel.forward, None)\n"
        "require_output_processor(h)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(trees["upstream"]), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("RuntimeError")
    release = patching.status(trees["upstream"]).release
    assert f"megatron-core {release}" in err and "unpatched" in err
    assert "megatron-overlay patch" in err


def _max_abs_diff(a: dict, b: dict) -> float:
    assert set(k for k in a if not k.endswith("kwarg_names")) == set(
        k for k in b if not k.endswith("kwarg_names"))
    worst = 0.0
    for key, value in a.items():
        if key.endswith("kwarg_names"):
            continue
        assert value.shape == b[key].shape, key
        worst = max(worst, (value - b[key]).abs().max().item())
    return worst


@pytest.fixture(scope="module", params=[1, 2], ids=["tp1", "tp2"])
def runs(request, trees, tmp_path_factory):
    tp = request.param
    out = tmp_path_factory.mktemp(f"runs-tp{tp}")
    return {
        "upstream": run_worker(trees["upstream"], tp, "none", out / "upstream"),
        "patched": run_worker(trees["patched"], tp, "none", out / "patched"),
        "redo": run_worker(trees["patched"], tp, "redo", out / "redo"),
        "by_name": run_worker(trees["patched"], tp, "redo-by-name", out / "by_name"),
    }


def test_no_processor_is_bit_identical_to_upstream(runs):
    """Logits, per-token loss and every gradient: max_abs = 0, SP on/off, tied/untied."""
    for upstream, patched in zip(runs["upstream"], runs["patched"]):
        assert len(upstream) > 10
        assert _max_abs_diff(upstream, patched) == 0.0


def test_processor_redoing_the_default_reproduces_it_exactly(runs):
    for upstream, redo in zip(runs["upstream"], runs["redo"]):
        assert _max_abs_diff(upstream, redo) == 0.0


def test_processor_by_name_reproduces_it_exactly(runs):
    for upstream, by_name in zip(runs["upstream"], runs["by_name"]):
        assert _max_abs_diff(upstream, by_name) == 0.0


def test_processor_receives_018_kwargs_by_name_and_order(runs):
    for rank in runs["redo"] + runs["by_name"]:
        names = [v for k, v in rank.items() if k.endswith("kwarg_names")]
        assert names, "processor never called"
        for got in names:
            assert tuple(got) == HOOK_KWARGS_018
