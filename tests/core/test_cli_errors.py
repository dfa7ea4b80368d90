"""Every error the CLI meets is one line on stderr and exit 2, never a traceback; the
read-only commands never write."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from megatron_overlay import cli, patching
from megatron_overlay.patching import patch_sets, transaction

from .conftest import REPO, SUPPORT, tree_digest


def _one_error_line(capsys, *argv) -> str:
    """Run the CLI in this process; it must exit 2 with one error line; returns the line."""
    assert cli.main([str(a) for a in argv]) == cli.EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith("megatron-overlay: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("command", ["patch", "unpatch"])
def test_a_write_the_filesystem_refuses_is_one_line(core_copy, capsys, monkeypatch, command):
    """A read-only file system (EROFS on the first staged file): exit 2, the tree as it was."""
    if command == "unpatch":
        patching.patch(core_copy)
    before = tree_digest(core_copy)

    def refused(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(transaction, "_write_synced", refused)
    line = _one_error_line(capsys, command, "--site", core_copy)
    assert "Read-only file system: " in line and str(core_copy) in line
    assert tree_digest(core_copy) == before


def test_a_read_only_folder_is_refused_before_any_write(core_copy, capsys, monkeypatch):
    """Files may be writable in a folder that is not, where the staged files go."""
    folder = core_copy / "megatron" / "core" / "models" / "gpt"
    real_access = os.access
    monkeypatch.setattr(patching.core.os, "access",
                        lambda path, mode: path != folder and real_access(path, mode))
    before = tree_digest(core_copy)
    assert f"cannot write {folder}:" in _one_error_line(capsys, "patch", "--site", core_copy)
    assert tree_digest(core_copy) == before


def test_a_bad_from_wheel_is_one_line(tmp_path, capsys):
    missing = tmp_path / "megatron_core-0.13.1-py3-none-any.whl"
    out = tmp_path / "out"
    line = _one_error_line(capsys, "wheel", "0.13.1", "--from", missing, "--out", out)
    assert f"No such file or directory: {missing}" in line
    missing.write_bytes(b"not a zip")
    assert "not a readable wheel" in _one_error_line(capsys, "wheel", "0.13.1", "--from",
                                                     missing, "--out", out)
    assert not out.exists()


@pytest.fixture()
def patch_sets_reread():
    """The patch sets' caches emptied before and after the test."""
    for cached in (patch_sets.supported_releases, patch_sets.find_patch_set):
        cached.cache_clear()
    yield
    for cached in (patch_sets.supported_releases, patch_sets.find_patch_set):
        cached.cache_clear()


def test_a_broken_manifest_is_one_line(tmp_path, capsys, monkeypatch, patch_sets_reread):
    patches = tmp_path / "patches"
    (patches / "0.13.1").mkdir(parents=True)
    (patches / "0.13.1" / "manifest.json").write_text('{"release": "0.13.1",')
    dist_info = tmp_path / "site" / "megatron_core-0.13.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: megatron-core\nVersion: 0.13.1\n")
    monkeypatch.setattr(patch_sets, "_patches_dir", lambda: patches)
    line = _one_error_line(capsys, "status", "--site", dist_info.parent)
    assert "patch set for 0.13.1" in line and "JSONDecodeError" in line and "reinstall" in line


def test_a_record_that_is_not_text_is_one_line(core_copy, capsys):
    record = next(core_copy.glob("*.dist-info/RECORD"))
    record.write_bytes(b"\xff" + record.read_bytes())
    assert "RECORD is not UTF-8" in _one_error_line(capsys, "status", "--site", core_copy)


@pytest.mark.parametrize("command", ["status", "verify"])
def test_read_only_commands_never_write(core_copy, command):
    """Not even where an interrupted run left a journal and staged files behind (status
    reports them; the next patch rolls them back)."""
    patching.patch(core_copy)
    target = next(core_copy.rglob("gpt_model.py"))
    (target.parent / (target.name + transaction.NEW_SUFFIX)).write_bytes(b"staged")
    before = tree_digest(core_copy)
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, str(SUPPORT / "kill_at_step.py"), "0", command,
                           "--site", str(core_copy)], capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().endswith("writes: 0"), proc.stderr
    assert tree_digest(core_copy) == before


def test_the_demo_without_megatron_is_one_line():
    """Right after the cluster route's `pip install --no-deps .`: a one-line refusal naming
    what to install, not an ImportError's traceback (megatron made unimportable here)."""
    code = ("import sys; sys.modules['megatron'] = None; "
            "from megatron_overlay.cli import main; sys.exit(main(['demo']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("megatron-overlay: error: the demo needs megatron-core")


def test_python_dash_m_runs_the_command():
    proc = subprocess.run([sys.executable, "-m", "megatron_overlay", "--version"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("megatron-overlay "), proc.stderr
