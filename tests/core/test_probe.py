"""require_output_processor(model, processor=...) says in advance what the forward will do.

On this leg's core, restored to upstream and patched (the ``trees`` copies): a real tiny
GPTModel (and, in the hybrid tests, hybrid model) is asked about no processor, the ``fused_logprob`` callable, the name
``"fused_logprob"`` and an unknown name, and then run with each. The probe must pass
exactly when the forward works, and otherwise name the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from megatron_overlay import patching

from .conftest import REPO, SUPPORT

CASES = ("none", "callable", "name", "unknown_name")


def _ask(tree) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(REPO)]),
               PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(SUPPORT / "probe_worker.py")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def asked(trees) -> dict:
    """form -> model kind ("gpt", "hybrid") -> case -> what the probe and forward did."""
    return {form: _ask(trees[form]) for form in ("upstream", "patched")}


@pytest.fixture(scope="module")
def answers(asked) -> dict:
    return {form: by_model["gpt"] for form, by_model in asked.items()}


def test_a_wrapped_model_is_sent_to_the_megatron_model_itself(asked, trees):
    """A wrapper's forward (DDP's, say) has no hook keywords of its own: the fix is to ask
    about the model inside, on every core; on a native one not "run patch", which
    back-ports the hook to the hybrid class only and would not change the answer."""
    for form in ("upstream", "patched"):
        kind, message = asked[form]["wrapped_gpt"]["probe"]
        assert kind == "RuntimeError", (form, message)
        if patching.status(trees[form]).state == patching.UNPATCHED:
            continue  # a pre-0.18 upstream core: the patch comes first
        assert "Call it on the megatron model itself" in message, (form, message)
        assert "has the hook on GPTModel only" not in message, (form, message)


def test_hybrid_model_probe_passes_exactly_when_its_forward_works(asked):
    for form, by_model in asked.items():
        cases = by_model["hybrid"]
        assert set(cases) == set(CASES)
        for case, result in cases.items():
            if case != "none":
                assert (result["probe"][0] == "ok") == (result["forward"][0] == "ok"), (
                    form, case, result)
    for case in ("none", "callable", "name"):
        assert asked["patched"]["hybrid"][case]["probe"] == ["ok", ""], case


def test_an_upstream_hybrid_model_has_no_hook_and_the_probe_names_the_patch(asked, trees):
    """No release has the hook on the hybrid class, native 0.18+ cores included."""
    upstream = asked["upstream"]["hybrid"]
    assert upstream["callable"]["forward"][0] == "TypeError"
    assert "unexpected keyword argument 'output_processor'" in upstream["callable"]["forward"][1]
    for case in CASES:
        kind, message = upstream[case]["probe"]
        assert kind == "RuntimeError", (case, message)
        assert "no output_processor/output_processor_context" in message
        assert "run `megatron-overlay patch`" in message, message
        if patching.status(trees["upstream"]).state == patching.NATIVE:
            assert "has the hook on GPTModel only" in message and "HybridModel" in message


def test_the_probe_passes_exactly_when_the_forward_works(answers):
    for form, cases in answers.items():
        assert set(cases) == set(CASES)
        for case, result in cases.items():
            probe_ok = result["probe"][0] == "ok"
            forward_ok = result["forward"][0] == "ok"
            if case == "none":  # no processor: the probe asks for the hook, the forward doesn't
                continue
            assert probe_ok == forward_ok, (form, case, result)


def test_a_patched_core_takes_callables_and_names(answers):
    for case in ("none", "callable", "name"):
        assert answers["patched"][case]["probe"] == ["ok", ""], case


def test_an_unknown_name_lists_the_known_ones(answers):
    for form in ("upstream", "patched"):
        kind, message = answers[form]["unknown_name"]["probe"]
        if form == "upstream" and kind == "RuntimeError":
            continue  # pre-0.18 upstream: no hook at all, said first
        assert kind == "ValueError"
        assert "'fused_logporb'" in message and "fused_logprob" in message.split("known:")[1]


def test_a_native_core_without_the_lookup_refuses_names_with_the_fix(answers, trees):
    """0.18+ upstream: the hook is there, so `model(..., output_processor="fused_logprob")`
    would die inside megatron; the probe says so first and names three fixes."""
    upstream = answers["upstream"]
    if patching.status(trees["upstream"]).state != patching.NATIVE:
        pytest.skip("a pre-0.18 upstream core has no hook (see test_hook_contract)")
    assert upstream["callable"]["probe"] == ["ok", ""]
    assert upstream["name"]["forward"] == ["TypeError", "'str' object is not callable"]
    kind, message = upstream["name"]["probe"]
    assert kind == "RuntimeError"
    assert "output_processor='fused_logprob' is a name" in message
    assert str(trees["upstream"]) in message
    assert "`megatron-overlay patch`" in message
    assert "megatron-overlay wheel" in message
    assert "from megatron_overlay.processors.fused_logprob import fused_logprob" in message


def test_a_core_without_the_hook_refuses_everything_with_the_fix(answers, trees):
    if patching.status(trees["upstream"]).state == patching.NATIVE:
        pytest.skip("a native core has the hook")
    for case in CASES:
        kind, message = answers["upstream"][case]["probe"]
        assert kind == "RuntimeError" and "unpatched" in message
        assert "megatron-overlay patch" in message


_HOLDER_SCRIPT = """
import functools, sys
from megatron.core.models.gpt import GPTModel
from megatron_overlay import require_output_processor
holder = type("H", (), {})()
holder.forward = functools.partial(GPTModel.forward, None)
try:
    require_output_processor(holder, processor="fused_logprob")
    print("ok")
except RuntimeError as err:
    print("RuntimeError", err)
"""


def test_a_source_tree_without_metadata_is_judged_by_its_source(trees, tmp_path):
    """megatron on the path with no dist-info (a source checkout): names pass when its
    gpt_model.py has the overlay's lookup."""
    if patching.status(trees["upstream"]).state != patching.NATIVE:
        pytest.skip("a pre-0.18 upstream core has no hook to judge")
    verdicts = {}
    for form in ("upstream", "patched"):
        shutil.copytree(trees[form] / "megatron", tmp_path / form / "megatron")
        env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=os.pathsep.join(
            [str(tmp_path / form), str(REPO)]))
        proc = subprocess.run([sys.executable, "-c", _HOLDER_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        verdicts[form] = proc.stdout.strip().splitlines()[-1]
    assert verdicts["patched"] == "ok"
    assert verdicts["upstream"].startswith("RuntimeError")
    assert "no megatron-core distribution" in verdicts["upstream"]
