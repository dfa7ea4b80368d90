"""`megatron-overlay demo`: options checked by argparse, a quiet run, a complete report."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import REPO


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run([sys.executable, "-m", "megatron_overlay.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("args, text", [
    (["--temperature", "0"], "argument --temperature: must be finite and > 0, got 0"),
    (["--temperature", "inf"], "argument --temperature: must be finite and > 0"),
    (["--temperature", "1e-39"], "argument --temperature: must be >= 1.175e-38 (fp32's "
                                 "smallest normal number"),
    (["--temperature", "warm"], "argument --temperature: 'warm' is not a number"),
    (["--tokens", "7"], "argument --tokens: must be even"),
    (["--tokens", "-2"], "argument --tokens: must be >= 2"),
    (["--hidden", "30"], "argument --hidden: must be a multiple of 4"),
    (["--vocab", "0"], "argument --vocab: must be >= 2"),
    (["--repeats", "0"], "argument --repeats: must be >= 1"),
    (["--warmup", "-1"], "argument --warmup: must be >= 0"),
])
def test_bad_options_are_usage_errors_not_tracebacks(args, text):
    proc = _cli("demo", *args, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: megatron-overlay demo")
    assert text in proc.stderr and "Traceback" not in proc.stderr


def test_help_shows_every_default_without_importing_torch():
    script = ("import sys\nfrom megatron_overlay.cli import main\n"
              "try:\n    main(['demo', '--help'])\nexcept SystemExit:\n    pass\n"
              "print('torch imported' if 'torch' in sys.modules else 'no torch')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("no torch")
    for default in ("(default: 2048)", "(default: 32000)", "(default: 256)",
                    "(default: 0.7)", "(default: 1)", "(default: 5)"):
        assert default in proc.stdout


def test_a_small_demo_reports_both_paths_and_keeps_warnings_out_of_the_progress_display():
    proc = _cli("demo", "--tokens", "64", "--vocab", "512", "--hidden", "32",
                "--warmup", "1", "--repeats", "2")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    for line in ("fused_logprob", "materialized logits", "max |log_probs diff|",
                 "(min-max of 2)", "MiB"):
        assert line in out
    diff = float(out.split("max |log_probs diff| = ")[1].split()[0])
    assert diff < 1e-4
    # megatron warns (Apex/TE missing) on every CPU machine: held back, summarized on stdout
    assert "note: held back during the demo:" in out
    assert "Warning" not in proc.stderr and "warnings.warn" not in proc.stderr
    assert "USDT" not in proc.stderr  # the profiler's own C++ log lines


def test_held_back_stderr_takes_python_and_c_level_writes_and_returns_them_on_failure(capfd):
    import warnings

    from megatron_overlay.demo import _held_back_stderr

    with _held_back_stderr(record_warnings=True) as (stream, read):
        warnings.warn("Apex is not installed", UserWarning)
        print("a torch log line", file=sys.stderr)
        os.write(2, b"a C++ log line\n")
        stream.write("progress\n")
        text, caught = read()
    assert [str(w.message) for w in caught] == ["Apex is not installed"]
    assert "a torch log line" in text and "a C++ log line" in text
    assert capfd.readouterr().err == "progress\n"

    with pytest.raises(RuntimeError), _held_back_stderr(record_warnings=True):
        warnings.warn("Apex is not installed", UserWarning)
        os.write(2, b"why it failed\n")
        raise RuntimeError("the demo failed")
    err = capfd.readouterr().err
    assert "UserWarning: Apex is not installed" in err and "why it failed" in err
