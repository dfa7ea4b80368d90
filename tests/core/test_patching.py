"""Patch, unpatch, refuse, survive interruption: on a copy of the installed core's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from megatron_overlay import patching
from megatron_overlay.patching import transaction

from .conftest import copy_core, patch_set_for, tree_digest


def test_installed_core_is_patched_by_setup(installed):
    """The README's set-up leaves a patched core (or a native one with the name lookup)."""
    ok, st, problems = patching.verify()
    assert ok, problems
    assert st.name_lookup
    assert st.state == (patching.NATIVE if st.hook == "native" else patching.PATCHED)


def test_round_trip_is_byte_identical(core_copy):
    before = tree_digest(core_copy)
    assert patching.status(core_copy).state in (patching.UNPATCHED, patching.NATIVE)
    patched = patching.patch(core_copy)
    assert patched.name_lookup
    changed = {p for p, data in tree_digest(core_copy).items() if before.get(p) != data}
    expected = {f.path for f in patch_set_for(patched.release).files}
    assert expected <= changed, "patched files did not change"
    assert all(p in expected or ".dist-info/" in p for p in changed), changed
    _assert_bytecode_fresh(core_copy, expected)
    patching.unpatch(core_copy)
    assert tree_digest(core_copy) == before
    _assert_bytecode_fresh(core_copy, expected)


def _assert_bytecode_fresh(root, paths):
    """Each touched module's cached .pyc matches its source (mtime and size in the header)."""
    import importlib.util
    import struct

    for rel in paths:
        source = root / rel
        pyc = importlib.util.cache_from_source(str(source))
        header = open(pyc, "rb").read(16)
        flags, mtime, size = struct.unpack("<4xIII", header)
        assert flags == 0  # timestamp-based
        assert mtime == int(source.stat().st_mtime) & 0xFFFFFFFF and size == source.stat().st_size


def test_another_interpreters_bytecode_is_dropped_and_not_replaced_by_ours(core_copy):
    """Patching a site whose .pyc are another interpreter's (pip compiled them for the
    site's Python; the overlay runs from another): the stale ones go, and no .pyc of the
    running interpreter's tag appears (upstream's files never had one)."""
    import importlib.util

    release = patching.status(core_copy).release
    touched = [core_copy / f.path for f in patch_set_for(release).files]
    other = "cpython-399" if sys.implementation.cache_tag != "cpython-399" else "cpython-398"
    for source in touched:  # as pip compiles every module for the site's interpreter
        (source.parent / "__pycache__").mkdir(exist_ok=True)
        for sibling in source.parent.glob("*.py"):
            (source.parent / "__pycache__" / f"{sibling.stem}.{other}.pyc").write_bytes(b"old")
    for step in (patching.patch, patching.unpatch):
        step(core_copy)
        for source in touched:
            cache = source.parent / "__pycache__"
            assert not list(cache.glob(f"{source.stem}.*.pyc")), list(cache.iterdir())
            assert not os.path.exists(importlib.util.cache_from_source(str(source)))


def test_patching_twice_is_a_noop(core_copy):
    patching.patch(core_copy)
    first = tree_digest(core_copy)
    stamps = {p: p.stat().st_mtime_ns for p in core_copy.rglob("*.py")}
    st = patching.patch(core_copy)
    assert st.name_lookup
    assert tree_digest(core_copy) == first
    assert stamps == {p: p.stat().st_mtime_ns for p in core_copy.rglob("*.py")}


def test_modified_core_is_refused_and_left_unchanged(core_copy):
    release = patching.status(core_copy).release
    target = core_copy / patch_set_for(release).files[0].path
    target.write_bytes(target.read_bytes() + b"\n# a local edit\n")
    before = tree_digest(core_copy)
    st = patching.status(core_copy)
    if patching.find_patch_set(release) is None:
        # served by content (0.18.1, 0.19.1): edited, it is a core no patch set matches
        assert st.state in (patching.NATIVE, patching.UNSUPPORTED) and not st.name_lookup
    else:
        assert st.state == patching.MODIFIED
    with pytest.raises(patching.PatchError) as err:
        patching.patch(core_copy)
    assert target.relative_to(core_copy).as_posix() in str(err.value)
    assert release in str(err.value)
    assert tree_digest(core_copy) == before


def test_failure_midway_leaves_the_tree_unpatched(core_copy, monkeypatch):
    before = tree_digest(core_copy)
    real_replace = os.replace
    calls = {"n": 0}

    def failing_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 3:  # journal, then one file renamed, then this one fails
            raise OSError("injected failure")
        return real_replace(src, dst)

    monkeypatch.setattr(transaction.os, "replace", failing_replace)
    with pytest.raises(patching.PatchError, match="injected"):
        patching.patch(core_copy)
    monkeypatch.undo()
    assert calls["n"] >= 3
    assert tree_digest(core_copy) == before
    assert patching.status(core_copy).name_lookup is False


def test_metadata_tells_the_truth(core_copy):
    upstream = patching.status(core_copy)
    st = patching.patch(core_copy)
    version = Version(st.core_version)
    assert version.local == "overlay.2"
    assert SpecifierSet(f"=={upstream.release}").contains(version)  # pins still hold
    ok, _, problems = patching.verify(core_copy)
    assert ok, problems
    marker = json.loads(next(core_copy.glob("*.dist-info/megatron_overlay.json")).read_text())
    assert marker["patch_set"] == st.patch_set


def test_pip_sees_the_overlay_version_and_uninstalls_cleanly(tmp_path):
    """pip shows X+overlay.2 and `pip uninstall` removes every file of the patched core."""
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    site = next(env_dir.glob("lib/python*/site-packages"))
    copy_core(site)
    patching.unpatch(site)
    patching.patch(site)
    target_py = str(env_dir / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", target_py]
    # no PYTHONPATH: pip must see the throwaway environment's core, not one on the path
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shown = subprocess.run(pip + ["show", "megatron-core"], capture_output=True, text=True,
                           env=env)
    assert shown.returncode == 0, shown.stderr
    assert "+overlay.2" in shown.stdout
    removed = subprocess.run(pip + ["uninstall", "-y", "megatron-core"],
                             capture_output=True, text=True, env=env)
    assert removed.returncode == 0, removed.stderr
    left = [p for p in site.rglob("*")
            if p.is_file() and p.relative_to(site).parts[0].startswith("megatron")]
    assert left == []


def test_cli_status_json(installed):
    proc = subprocess.run([sys.executable, "-m", "megatron_overlay.cli", "status", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["release"] == installed.release
    assert data["state"] in ("patched", "native")
    assert data["patch_set"] == patch_set_for(installed.release).patch_set_id


def test_every_release_has_a_patch_set():
    releases = patching.supported_releases()
    for release in ["0.12.0", "0.12.3", "0.13.1", "0.14.0", "0.15.3", "0.16.1", "0.17.1",
                    "0.18.0", "0.19.2"]:
        assert release in releases
    for release in releases:
        ps = patching.find_patch_set(release)
        assert ps.hook == ("native" if Version(release) >= Version("0.18") else "backport")


def test_states_read_as_their_names():
    """State is a StrEnum: comparisons, f-strings and the CLI's JSON see the bare names."""
    assert [str(state) for state in patching.State] == [
        "native", "patched", "unpatched", "modified", "unsupported"]
    assert patching.PATCHED == "patched" and f"{patching.UNPATCHED}" == "unpatched"
    st = patching.Status(None, None, patching.UNSUPPORTED)
    assert json.dumps(st.to_dict()).startswith(
        '{"core_version": null, "release": null, "state": "unsupported", ')


def test_a_read_racing_the_first_writer_reads_again_after_it(tmp_path):
    """No lock file yet (no overlay command ever wrote here): a reader reads unlocked. A
    first writer that starts during that read creates the lock file before it changes
    anything; the reader then reads again under the shared lock, after the writer is
    done, and returns that read. A reader never creates the file itself."""
    import threading

    from megatron_overlay.patching import lock

    reads, writer_done = [], threading.Event()
    writer_holds = threading.Event()

    def writer():
        with lock.exclusive(tmp_path):
            writer_holds.set()
            time.sleep(0.3)
            (tmp_path / "state").write_text("written")
            writer_done.set()  # still holding the lock: a reader after it sees this set

    def read():
        if not reads:  # the first, unlocked read: a first writer starts meanwhile
            threading.Thread(target=writer).start()
            writer_holds.wait(5)
        reads.append(((tmp_path / "state").read_text() if (tmp_path / "state").exists()
                      else "half done", writer_done.is_set()))
        return reads[-1][0]

    assert lock.read_consistently(tmp_path, read) == "written"
    assert reads == [("half done", False), ("written", True)]  # the second waited

    # no writer: one read, and still no lock file where none was
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    calls = []
    assert lock.read_consistently(fresh, lambda: calls.append(1) or "x") == "x"
    assert calls == [1] and not lock.lock_path(fresh).exists()
