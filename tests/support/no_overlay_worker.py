"""A patched core without the megatron-overlay package: callables run, names explain.

    python no_overlay_worker.py     (PYTHONPATH: the patched core's site, then the repo)

Blocks ``import megatron_overlay`` (as if it were not installed), builds the tiny GPTModel
on one gloo rank, runs ``output_processor=`` a callable (must work) and a name (must fail
with a ModuleNotFoundError that says how to get names), and prints "OK".
"""

from __future__ import annotations

import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_model_builder():
    """The model builder loaded from its file, before the package is blocked: it imports
    nothing of megatron_overlay, so this process still has no megatron_overlay at all."""
    path = os.path.join(REPO, "megatron_overlay", "model_builder.py")
    spec = importlib.util.spec_from_file_location("model_builder", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


model_builder = _load_model_builder()


class NotInstalled:
    """Finds ``megatron_overlay`` nowhere, as when the package is not installed (the
    repository on sys.path and the venv's editable install would find it otherwise)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "megatron_overlay":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled)


def identity_processor(*, hidden_states, **_):
    return hidden_states


def main() -> None:
    model_builder.init_distributed(0, 1, model_builder.free_port(), tp=1)
    cfg = model_builder.ModelConfig()
    model = model_builder.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = model_builder.batch(cfg)
    out = model(input_ids, position_ids, mask, labels=labels,
                output_processor=identity_processor)
    assert out.shape == (cfg.seq, cfg.batch, cfg.hidden), out.shape
    try:
        model(input_ids, position_ids, mask, labels=labels, output_processor="fused_logprob")
    except ModuleNotFoundError as err:
        assert "pip install megatron-overlay" in str(err), str(err)
        assert err.name == "megatron_overlay"
    else:
        raise AssertionError("a processor name ran without megatron-overlay installed")
    model_builder.shutdown()
    print("OK")


if __name__ == "__main__":
    main()
