"""The README's install commands, run as written, in fresh virtual environments.

Each block the README marks ``<!-- ci: NAME -->`` is run by bash (``set -euo pipefail``)
in a copy of this checkout, with a fresh venv first on the PATH (its pip, then the
``megatron-overlay`` it installs), so that a wrong flag, a missing dependency or a moved
file fails here rather than for a newcomer. The blocks name megatron-core 0.13.1, so they
run in the 0.13.1 leg; ``examples/distill_topk_kl.py`` runs in every leg at a small size.

One precondition the README states instead of running: the environment has torch (a bare
``torch`` requirement would pull the registry's multi-GB CUDA build), so the venvs that
install megatron-core with its dependencies get ``torch==2.13.0`` first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from megatron_overlay import patching

from .conftest import REPO

README = (REPO / "README.md").read_text()
BLOCK = re.compile(r"<!-- ci: (?P<name>[\w-]+) -->\n```bash\n(?P<body>.*?)```", re.S)
BLOCKS = {m["name"]: m["body"] for m in BLOCK.finditer(README)}
CLI = [sys.executable, "-m", "megatron_overlay.cli"]

needs_0131 = pytest.mark.skipif(patching.locate().release != "0.13.1",
                                reason="the README's commands name megatron-core 0.13.1")


def test_the_readme_marks_its_install_blocks():
    assert set(BLOCKS) == {"cluster", "pins", "replace", "in-place"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the checkout (what a newcomer clones), the README's working directory."""
    dest = tmp_path_factory.mktemp("readme") / "megatron-overlay"
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".whl", "out", "build", "*.egg-info", "__pycache__"))
    return dest


@pytest.fixture()
def venvs(tmp_path):
    """Fresh venvs under tmp_path, removed after the test (each with torch is ~1.1 GiB and
    CI's disk also holds the next leg)."""
    made = []

    def make(name: str, torch: bool) -> Path:
        made.append(tmp_path / name)
        return fresh_venv(made[-1], torch)
    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def fresh_venv(path: Path, torch: bool) -> Path:
    venv.EnvBuilder(with_pip=True).create(path)
    if torch:
        subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "torch==2.13.0"], check=True)
    return path


def run_block(name: str, env_dir: Path, cwd: Path, body: str | None = None
              ) -> subprocess.CompletedProcess:
    """The block as written (or ``body``, lines of it); the venv's bin first on the PATH
    (uv from the test's own environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(VIRTUAL_ENV=str(env_dir), PIP_DISABLE_PIP_VERSION_CHECK="1",
               PATH=os.pathsep.join([str(env_dir / "bin"), str(Path(sys.executable).parent),
                                     env["PATH"]]))
    script = "set -euo pipefail\n" + (BLOCKS[name] if body is None else body)
    proc = subprocess.run(["bash", "-c", script], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (name, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def site_of(env_dir: Path) -> Path:
    return next(env_dir.glob("lib/python*/site-packages"))


@needs_0131
def test_the_cluster_route_then_the_pins_as_written(workdir, venvs):
    env_dir = venvs("cluster", torch=True)
    out = run_block("cluster", env_dir, workdir).stdout
    assert "patched (patch set 0.13.1+overlay.2)" in out
    st = patching.status(site_of(env_dir))
    assert st.ready and st.core_version == "0.13.1+overlay.2"
    for dist in ("packaging", "tqdm"):  # the overlay's own dependencies came too
        assert list(site_of(env_dir).glob(f"{dist}-*.dist-info")), dist
    requirement = (workdir / "requirements.txt").read_text()
    assert requirement.startswith("megatron-core==0.13.1+overlay.2 --hash=sha256:")
    run_block("pins", env_dir, workdir)  # on an installed patched core: all no-ops
    assert patching.status(site_of(env_dir)).ready


@needs_0131
def test_the_require_hashes_line_installs_into_a_bare_environment(workdir, venvs):
    if not (workdir / "requirements.txt").exists():
        pytest.skip("needs the cluster route's wheelhouse (the test above)")
    env_dir = venvs("hashes", torch=False)
    line = next(line for line in BLOCKS["pins"].splitlines() if "--require-hashes" in line)
    run_block("pins", env_dir, workdir, body=line + "\n")
    st = patching.status(site_of(env_dir))
    assert st.ready and st.core_version == "0.13.1+overlay.2"


@needs_0131
def test_the_in_place_route_then_replacing_an_upstream_core(workdir, venvs):
    if not (workdir / "wheelhouse").exists():
        pytest.skip("needs the cluster route's wheelhouse (the test above)")
    env_dir = venvs("in-place", torch=True)
    out = run_block("in-place", env_dir, workdir).stdout
    assert re.search(r"^patch: 2 file\(s\) changed", out, re.M), out
    assert "patched (patch set 0.13.1+overlay.2)" in out
    site = site_of(env_dir)
    subprocess.run([*CLI, "unpatch", "--site", str(site)], check=True, capture_output=True)
    assert patching.status(site).state == patching.UNPATCHED
    run_block("replace", env_dir, workdir)  # an upstream core, replaced by the wheel
    st = patching.status(site)
    assert st.ready and st.core_version == "0.13.1+overlay.2"


def test_the_distillation_example_runs_at_a_small_size():
    assert "examples/distill_topk_kl.py" in README
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "distill_topk_kl.py"),
                           "--tokens", "128", "--vocab", "512"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fused, materialized = re.search(r"top-k forward KL: fused (\S+), materialized (\S+)",
                                    proc.stdout).groups()
    assert fused == materialized
    rel = float(re.search(r"max relative difference (\S+)", proc.stdout).group(1))
    assert rel < 1e-5


def test_status_names_the_overlays_missing_dependencies(workdir, venvs):
    """`pip install --no-deps .` alone (the cluster route's first line): status says what
    is missing and is not ready, instead of "names resolved" and a demo that cannot run."""
    env_dir = venvs("bare", torch=False)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "--no-deps", str(workdir)], check=True)
    proc = subprocess.run([str(env_dir / "bin" / "megatron-overlay"), "status"],
                          capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(row for row in proc.stdout.splitlines() if "own dependencies" in row)
    for name in ("torch", "packaging", "tqdm"):
        assert name in line, line


def test_the_api_examples_run_as_written_on_a_real_gpt_model():
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "support" / "readme_worker.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == README.count("<!-- ci: api -->") >= 5
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed
