"""The processor registry: names, errors, and third-party entry points."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from megatron_overlay import processors


def test_builtins_are_registered():
    assert {"fused_logprob", "fused_ce_loss", "logits"} <= set(processors.available())
    assert processors.resolve("fused_logprob").__name__ == "fused_logprob"


def test_callables_pass_through():
    def mine(**kwargs):
        return kwargs

    assert processors.resolve(mine) is mine


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        processors.resolve("fused_logporb")
    assert "fused_logporb" in str(err.value)
    for name in processors.available():
        assert name in str(err.value)


def test_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="callable or a registered name"):
        processors.resolve(42)


def test_register_and_conflicts():
    @processors.register("tests.echo")
    def echo(**kwargs):
        return kwargs

    assert processors.resolve("tests.echo") is echo
    processors.register("tests.echo")(echo)  # the same function again: fine
    with pytest.raises(ValueError, match="already registered"):
        processors.register("tests.echo")(lambda **kw: None)
    with pytest.raises(ValueError, match="non-empty string"):
        processors.register("")


def test_entry_point_group_registers_third_party_processors(tmp_path):
    """A package declaring `megatron_overlay.output_processors` is resolvable by name."""
    (tmp_path / "thirdparty_proc.py").write_text(textwrap.dedent("""
        def my_processor(**kwargs):
            return "from the entry point"
    """))
    dist = tmp_path / "thirdparty_proc-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-proc\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{processors.ENTRY_POINT_GROUP}]\nthird_party = thirdparty_proc:my_processor\n")
    script = ("from megatron_overlay.processors import resolve, available\n"
              "assert 'third_party' in available()\n"
              "print(resolve('third_party')())\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "from the entry point"
