"""A patched core without the megatron-overlay package: callables run, names explain.

    python no_overlay_worker.py     (PYTHONPATH: the patched core's site, then the repo)

Blocks ``import megatron_overlay`` (as if it were not installed), builds the tiny GPTModel
on one gloo rank, runs ``output_processor=`` a callable (must work) and a name (must fail
with a ModuleNotFoundError that says how to get names), and prints "OK".
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class NotInstalled:
    """Finds ``megatron_overlay`` nowhere, as when the package is not installed (the
    repository on sys.path and the venv's editable install would find it otherwise)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "megatron_overlay":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled)

from tools import gpt_setup  # noqa: E402


def identity_processor(*, hidden_states, **_):
    return hidden_states


def main() -> None:
    gpt_setup.init_distributed(0, 1, gpt_setup.free_port(), tp=1)
    cfg = gpt_setup.ModelConfig()
    model = gpt_setup.build_model(cfg)
    input_ids, position_ids, mask, labels, _ = gpt_setup.batch(cfg)
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
    gpt_setup.shutdown()
    print("OK")


if __name__ == "__main__":
    main()
