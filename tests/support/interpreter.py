"""Runs a test file's ``--worker`` under Triton's interpreter and returns its report.

The interpreter tests (tests/ops/test_triton*_interpreter.py) run every case in one
subprocess: TRITON_INTERPRET must be set before Triton is imported, and one process keeps
the interpreter's start-up cost to once per file. The worker prints one line
``REPORT <json>``, a result or an error per case, so one failing case hides no other.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def interpreter_report(test_file: str, timeout_s: int) -> dict:
    """The report of ``python test_file --worker`` with TRITON_INTERPRET=1; skips the
    calling test where Triton cannot be imported, fails it where the worker fails."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not importable here; the interpreter tests need it "
                    "(pip install triton)")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("MEGATRON_OVERLAY_IMPL", None)
    proc = subprocess.run([sys.executable, test_file, "--worker"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"interpreter worker failed (rc {proc.returncode}):\n"
                    f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("REPORT "):])
