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


def test_listing_imports_no_processor_and_a_name_imports_only_its_own(tmp_path):
    """The built-ins are a table of "module:attr" targets, imported on first use of a name."""
    out = _run_with(tmp_path, """
        import sys
        from megatron_overlay import processors
        assert set(processors.available()) == set(processors.BUILTINS)
        loaded = lambda: sorted(m for m in sys.modules
                                if m.startswith("megatron_overlay.processors."))
        assert loaded() == ["megatron_overlay.processors.registry"], loaded()
        assert "torch" not in sys.modules
        assert processors.resolve("logits").__module__ == "megatron_overlay.processors.logits"
        assert "torch" not in sys.modules and "megatron_overlay.processors.fused_logprob" \
            not in sys.modules, loaded()
    """)
    assert out.returncode == 0, out.stderr


def test_a_builtin_name_cannot_be_taken():
    with pytest.raises(ValueError, match="'logits' is already registered"):
        processors.register("logits")(lambda **kw: None)
    builtin = processors.resolve("logits")
    assert processors.register("logits")(builtin) is builtin  # the same function: fine


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
    for not_callable in (42, None, "tests.echo"):  # refused, nothing registered
        with pytest.raises(TypeError, match="'tests.other' must be callable"):
            processors.register("tests.other")(not_callable)
    assert "tests.other" not in processors.available()


def _fake_distribution(site, dist_name: str, module: str, source: str, entries: dict) -> None:
    """A module plus an installed-looking dist-info declaring ``entries`` (name -> target)."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    dist = site / f"{dist_name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (dist / "entry_points.txt").write_text(f"[{processors.ENTRY_POINT_GROUP}]\n{lines}")


def _run_with(site, script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True)


def test_entry_point_group_registers_third_party_processors(tmp_path):
    """A package declaring `megatron_overlay.output_processors` is resolvable by name."""
    _fake_distribution(tmp_path, "thirdparty-proc", "thirdparty_proc", """
        def my_processor(**kwargs):
            return "from the entry point"
    """, {"third_party": "thirdparty_proc:my_processor"})
    out = _run_with(tmp_path, """
        from megatron_overlay.processors import resolve, available
        assert 'third_party' in available()
        print(resolve('third_party')())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "from the entry point"


def test_a_broken_plugin_breaks_only_its_own_names(tmp_path):
    """Entry points are imported by name when asked for: a plugin whose import fails (or
    whose target is not callable) leaves the built-ins and other plugins working, and its
    own names raise an error naming the distribution and the entry point."""
    _fake_distribution(tmp_path, "broken-plugin", "broken_plugin", """
        raise ImportError("needs libfoo.so, which is not installed")
    """, {"broken": "broken_plugin:proc"})
    _fake_distribution(tmp_path, "odd-plugin", "odd_plugin", """
        NOT_A_FUNCTION = 42
    """, {"odd": "odd_plugin:NOT_A_FUNCTION"})
    _fake_distribution(tmp_path, "good-plugin", "good_plugin", """
        def proc(**kwargs):
            return "good"
    """, {"good": "good_plugin:proc"})
    out = _run_with(tmp_path, """
        import sys
        from megatron_overlay.processors import available, resolve
        assert resolve("fused_logprob").__name__ == "fused_logprob"
        assert {"broken", "odd", "good", "fused_logprob"} <= set(available())
        assert "broken_plugin" not in sys.modules  # listed, not imported
        assert resolve("good")() == "good"
        for name in ("broken", "odd"):
            try:
                resolve(name)
            except Exception as err:
                print(f"{name}|{type(err).__name__}|{err}")
        assert resolve("logits").__name__ == "logits"
    """)
    assert out.returncode == 0, out.stderr
    errors = {line.split("|")[0]: line.split("|")[1:] for line in out.stdout.splitlines()}
    kind, message = errors["broken"]
    assert kind == "RuntimeError"
    assert "`broken = broken_plugin:proc` of distribution broken-plugin 1.0" in message
    assert "needs libfoo.so" in message and "uninstall" in message
    kind, message = errors["odd"]
    assert kind == "TypeError"
    assert "distribution odd-plugin 1.0" in message and "not a callable" in message
