"""The hook on megatron's hybrid model class: GPTModel 0.18's contract, on every release.

MambaModel (0.12-0.17) and HybridModel (0.18-0.19; MambaModel is its alias there) take the
hook nowhere upstream; every patch set back-ports it to their ``forward``. The shared
workers (test_hook_contract, test_processors, test_distill_processors, test_probe) run the
hybrid configurations beside the GPTModel ones; this file holds what only the hybrid class
has: its signature, the keywords it gains, its inference paths, and its patch-set entry.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest

from megatron_overlay import has_output_processor, patching

from .conftest import REPO, SUPPORT, patch_set_for

HOOK = ["output_processor", "output_processor_context"]


def _hybrid_class():
    from megatron_overlay.model_builder import hybrid_model_class

    return hybrid_model_class()


def _release() -> tuple[int, int]:
    return tuple(int(p) for p in patching.locate().release.split(".")[:2])


def test_forward_takes_the_hook_and_every_gpt_keyword_as_keyword_only():
    params = inspect.signature(_hybrid_class().forward).parameters
    assert list(params)[-2:] == HOOK
    for name in HOOK + ["loss_mask", "packed_seq_params"]:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default is None, name
    assert "Callable" in str(params["output_processor"].annotation)
    assert "Any" in str(params["output_processor_context"].annotation)
    gpt = inspect.signature(__import__("megatron.core.models.gpt", fromlist=["GPTModel"])
                            .GPTModel.forward).parameters
    # a framework's GPTModel call, keyword for keyword, is a valid hybrid call
    for name in ("input_ids", "position_ids", "attention_mask", "decoder_input", "labels",
                 "inference_context", "runtime_gather_output", "loss_mask",
                 "packed_seq_params", *HOOK):
        assert name in gpt and name in params, name


def test_the_mamba_alias_inherits_the_hook_on_018_and_later():
    if _release() < (0, 18):
        pytest.skip("before 0.18 MambaModel is the hybrid class itself")
    from megatron.core.models.mamba.mamba_model import MambaModel

    assert MambaModel.forward is _hybrid_class().forward


def test_signature_detection_finds_it_as_frameworks_do():
    import functools

    holder = type("Holder", (), {})()
    holder.forward = lambda input_ids, position_ids, attention_mask, **kwargs: None
    assert not has_output_processor(holder)  # a catch-all is not the hook
    holder.forward = functools.partial(_hybrid_class().forward, None)  # bound-like
    assert has_output_processor(holder)


def test_every_patch_set_carries_the_hybrid_model_file():
    for release in patching.supported_releases():
        ps = patching.find_patch_set(release)
        models = dict(ps.models)
        minor = tuple(int(p) for p in release.split(".")[:2])
        hybrid = "HybridModel" if minor >= (0, 18) else "MambaModel"
        path = ("megatron/core/models/hybrid/hybrid_model.py" if minor >= (0, 18)
                else "megatron/core/models/mamba/mamba_model.py")
        assert models == {"GPTModel": ps.hook, hybrid: "backport"}, release
        assert path in [f.path for f in ps.files], release
        assert f"+++ b/{path}" in ps.diff_text


def test_status_names_the_hooked_classes(trees):
    hybrid = "HybridModel" if _release() >= (0, 18) else "MambaModel"
    patched = patching.status(trees["patched"])
    assert patched.models == {"GPTModel": "native" if patched.hook == "native" else
                              "back-ported", hybrid: "back-ported"}
    upstream = patching.status(trees["upstream"])
    assert upstream.models == ({"GPTModel": "native"} if upstream.hook == "native" else {})
    out = subprocess.run([sys.executable, "-m", "megatron_overlay.cli", "status", "--site",
                          str(trees["patched"])], capture_output=True, text=True).stdout
    assert f"{hybrid} (back-ported)" in out and "GPTModel (" in out


def test_a_modified_hybrid_file_is_refused_by_name(core_copy):
    from .conftest import tree_digest

    release = patching.status(core_copy).release
    rel = next(f.path for f in patch_set_for(release).files
               if "mamba_model" in f.path or "hybrid_model" in f.path)
    (core_copy / rel).write_bytes((core_copy / rel).read_bytes() + b"\n# a local edit\n")
    before = tree_digest(core_copy)
    with pytest.raises(patching.PatchError) as err:
        patching.patch(core_copy)
    assert rel in str(err.value)
    assert tree_digest(core_copy) == before


@pytest.fixture(scope="module")
def checks(trees) -> dict:
    out = {}
    for form in ("upstream", "patched"):
        env = dict(os.environ, PYTHONWARNINGS="ignore",
                   PYTHONPATH=os.pathsep.join([str(trees[form]), str(REPO)]))
        proc = subprocess.run([sys.executable, str(SUPPORT / "hybrid_worker.py")], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[form] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_frameworks_detecting_by_signature_take_the_fused_path_once_patched(checks):
    assert checks["upstream"]["detect"] == {"hooked": False}
    assert checks["patched"]["detect"] == {"hooked": True, "fields": ["entropy", "log_probs"],
                                           "shape": [2, 32]}


def test_packed_seq_params_reach_the_stack_or_are_refused_by_name(checks):
    kind, message = checks["patched"]["packed"]
    if _release() < (0, 16):  # no packing in the hybrid stack: refused before any work
        assert kind == "ValueError" and message.startswith("packed_seq_params: ")
        assert "pass None" in message
    else:  # handed to the stack, whose local attention (no TE here) cannot pack
        assert (kind, message) == ("AssertionError", "Packed sequence is not supported by "
                                   "DotProductAttention.Please use TEDotProductAttention instead.")


def test_a_chunk_without_the_output_layer_returns_what_gpt_model_returns(checks):
    """A non-last pipeline stage: no processor call, its hidden states back, as GPTModel."""
    chunks = checks["patched"]["no_output_layer"]
    assert chunks["hybrid"] == chunks["gpt"] == {"calls": 0, "shape": [32, 2, 64],
                                                 "has_output_layer": False}


def test_the_inference_path_calls_the_processor_as_native_gpt_model_does(checks):
    if _release() < (0, 18):
        pytest.skip("megatron's InferenceMode arrived in 0.18")
    inference = checks["patched"]["inference"]
    assert inference["hybrid"] == inference["gpt"]
    assert inference["hybrid"] == ["ok", {"returned": "processed", "calls": 1,
                                          "hidden_shape": [32, 2, 64],
                                          "context_is_callers": True}]


def test_block_scope_inference_graphs_never_replay_over_a_processor(checks):
    if _release() < (0, 18):
        pytest.skip("the hybrid model's own inference CUDA graphs arrived in 0.18")
    assert checks["patched"]["graph_bypass"] == {"without": True, "with": False}
