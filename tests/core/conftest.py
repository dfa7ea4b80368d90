"""Fixtures for tests that need the installed megatron-core (one core per test-matrix leg)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from megatron_overlay import patching
from megatron_overlay.patching.lock import LOCK_NAME

REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"
# tools/env.sh keeps upstream's wheel of each release it set up here
UPSTREAM_WHEELS = REPO / ".venv" / "wheelhouse" / "upstream"


def upstream_wheel_of(release: str, python_version: str | None = None) -> Path:
    """Upstream's megatron-core wheel of ``release`` (downloaded once, kept in .venv/)."""
    from megatron_overlay.patching import wheel

    found = sorted(UPSTREAM_WHEELS.glob(f"megatron_core-{release}-*.whl"))
    if found:
        return found[0]
    UPSTREAM_WHEELS.mkdir(parents=True, exist_ok=True)
    return wheel.download(release, UPSTREAM_WHEELS, python_version,
                          "manylinux_2_28_x86_64" if python_version else None)


def patch_set_for(release: str) -> patching.PatchSet:
    """The patch set serving ``release``: its own or, for a release without one (yanked
    0.18.1, 0.19.1), the one whose files upstream's wheel of it has byte for byte."""
    with zipfile.ZipFile(upstream_wheel_of(release)) as whl:
        names = set(whl.namelist())
        found = patching.match_patch_set(
            release, lambda rel: hashlib.sha256(whl.read(rel)).hexdigest() if rel in names
            else None)
    assert found is not None, f"no patch set serves {release}"
    return found


def unpack(wheel_path: Path, dest: Path) -> Path:
    """A wheel's files as an importable site directory (what pip installs, minus .pyc)."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel_path) as whl:
        whl.extractall(dest)
    return dest


def copy_core(dest: Path) -> Path:
    """Upstream's files of the installed core's release, as a site directory in ``dest``."""
    return unpack(upstream_wheel_of(patching.locate().release), dest)


def tree_digest(root: Path) -> dict[str, bytes]:
    """Every file under root except bytecode caches and the overlay's lock file (which
    lives beside the distributions on purpose): path -> bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.name != LOCK_NAME}


@pytest.fixture(scope="session")
def installed() -> patching.Core:
    return patching.locate()


@pytest.fixture(scope="session")
def trees(tmp_path_factory, installed):
    """Two copies of the installed core: restored to upstream, and patched."""
    root = tmp_path_factory.mktemp("cores")
    upstream = copy_core(root / "upstream")
    patched = copy_core(root / "patched")
    patching.patch(patched)
    return {"upstream": upstream, "patched": patched}


@pytest.fixture()
def core_copy(tmp_path) -> Path:
    """Upstream's files of the installed core's release, for patching tests."""
    return copy_core(tmp_path / "core")


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
