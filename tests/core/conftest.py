"""Fixtures for tests that need the installed megatron-core (one core per test-matrix leg)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megatron_overlay import patching

REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"


def copy_core(dest: Path) -> Path:
    """Copy the installed core (megatron/ and its dist-info) into ``dest``; no .pyc files."""
    core = patching.locate()
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(core.site / "megatron", dest / "megatron",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(core.dist_info, dest / core.dist_info.name)
    return dest


def tree_digest(root: Path) -> dict[str, bytes]:
    """Every file under root except bytecode caches: path -> bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="session")
def installed() -> patching.Core:
    return patching.locate()


@pytest.fixture(scope="session")
def trees(tmp_path_factory, installed):
    """Two copies of the installed core: restored to upstream, and patched."""
    root = tmp_path_factory.mktemp("cores")
    upstream = copy_core(root / "upstream")
    patching.revert(upstream)
    patched = copy_core(root / "patched")
    patching.apply(patched)
    return {"upstream": upstream, "patched": patched}


@pytest.fixture()
def core_copy(tmp_path) -> Path:
    """A fresh copy of the installed core, restored to upstream, for patching tests."""
    tree = copy_core(tmp_path / "core")
    patching.revert(tree)
    return tree


def run_worker(tree: Path | None, tp: int, mode: str | None, out: Path,
               script: str = "hook_worker.py") -> list[dict]:
    """Run a tests/support worker (tp gloo ranks) against the megatron in ``tree``
    (default: the installed core); returns each rank's saved results."""
    out.mkdir(parents=True, exist_ok=True)
    path = [str(tree)] if tree is not None else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path + [str(REPO)]),
               PYTHONWARNINGS="ignore")
    args = [sys.executable, str(SUPPORT / script), "--tp", str(tp), "--out", str(out)]
    if mode is not None:
        args += ["--mode", mode]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(tp)]
