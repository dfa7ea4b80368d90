"""Installing in place of upstream: patched wheels, pip and uv, every rank at once, kills.

Everything runs on the test-matrix leg's own release, with upstream's real wheel; pip and
uv really install into throwaway environments.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import venv
import zipfile
from base64 import urlsafe_b64encode
from pathlib import Path

import pytest

from megatron_overlay import patching
from megatron_overlay.patching import transaction

from .conftest import (REPO, SUPPORT, patch_set_for, tree_digest, unpack,
                       upstream_wheel_of)

CLI = [sys.executable, "-m", "megatron_overlay.cli"]
ENV = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
NO_PYTHONPATH = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def cli(*args, check_rc=None, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=ENV,
                          **kwargs)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def release() -> str:
    return patching.locate().release


@pytest.fixture(scope="module")
def upstream(release) -> Path:
    return upstream_wheel_of(release)


@pytest.fixture(scope="module")
def overlay_wheel(upstream, release, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    proc = cli("wheel", release, "--from", upstream, "--out", out, check_rc=0)
    return Path(proc.stdout.strip().splitlines()[-1])


def make_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(path)
    return path / "bin" / "python"


def pip(target_python: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check",
                           "--python", str(target_python), *map(str, args)],
                          capture_output=True, text=True, env=NO_PYTHONPATH)


def site_of(python: Path) -> Path:
    return next(python.parent.parent.glob("lib/python*/site-packages"))


# ---------------------------------------------------------------- the wheel itself

def test_wheel_is_valid_and_named_for_the_pin(overlay_wheel, upstream, release):
    assert overlay_wheel.name == upstream.name.replace(f"-{release}-", f"-{release}+overlay.2-")
    info = f"megatron_core-{release}+overlay.2.dist-info"
    with zipfile.ZipFile(overlay_wheel) as whl, zipfile.ZipFile(upstream) as up:
        names = whl.namelist()
        assert names[-1] == f"{info}/RECORD"
        rows = [r.split(",") for r in whl.read(f"{info}/RECORD").decode().splitlines()]
        # every file, and no directory (pip's uninstall would remove a listed directory
        # whole, other distributions' files in it too): as upstream's RECORD
        assert sorted(r[0] for r in rows) == sorted(n for n in names if not n.endswith("/"))
        up_info = f"megatron_core-{release}.dist-info"
        upstream_rows = {r.split(",")[0].replace(up_info, info)
                         for r in up.read(f"{up_info}/RECORD").decode().splitlines()}
        assert {r[0] for r in rows} == upstream_rows | {f"{info}/megatron_overlay.json"}
        for path, digest, size in rows:
            if path == f"{info}/RECORD":
                assert digest == size == ""
                continue
            data = whl.read(path)
            expected = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data)), path
        assert f"Version: {release}+overlay.2" in whl.read(f"{info}/METADATA").decode()
        marker = json.loads(whl.read(f"{info}/megatron_overlay.json"))
        assert marker["installed_from"] == "wheel" and marker["release"] == release
        assert whl.read(f"{info}/WHEEL") == up.read(f"{up_info}/WHEEL")  # same tags
        touched = {f.path for f in patch_set_for(release).files}
        for name in up.namelist():  # everything else is upstream's, byte for byte
            if name.startswith("megatron/") and name not in touched:
                assert whl.read(name) == up.read(name), name


def test_wheel_build_is_reproducible(overlay_wheel, upstream, release, tmp_path):
    again = Path(cli("wheel", release, "--from", upstream, "--out", tmp_path,
                     check_rc=0).stdout.splitlines()[-1])
    assert again.read_bytes() == overlay_wheel.read_bytes()


def test_wheel_refuses_a_modified_wheel_and_writes_nothing(upstream, release, tmp_path):
    touched = patch_set_for(release).files[0].path
    modified = tmp_path / upstream.name
    with zipfile.ZipFile(upstream) as src, zipfile.ZipFile(modified, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data + b"\n# local edit\n" if info.filename == touched else data)
    out = tmp_path / "out"
    proc = cli("wheel", release, "--from", modified, "--out", out, check_rc=2)
    assert touched in proc.stderr and release in proc.stderr
    assert not out.exists()
    wrong = cli("wheel", "0.11.0", "--from", upstream, "--out", out, check_rc=2)
    assert "not upstream megatron-core 0.11.0" in wrong.stderr and not out.exists()


def test_concurrent_wheel_builds_agree(upstream, release, overlay_wheel, tmp_path):
    procs = [subprocess.Popen([*CLI, "wheel", release, "--from", str(upstream), "--out",
                               str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV) for _ in range(6)]
    results = [(p.wait(), *p.communicate()) for p in procs]
    assert all(rc == 0 and "Traceback" not in err for rc, _, err in results), results
    built = sorted(tmp_path.glob("*.whl"))
    assert [p.name for p in built] == [overlay_wheel.name]
    assert built[0].read_bytes() == overlay_wheel.read_bytes()


def test_a_killed_builds_temporary_file_is_swept_a_running_ones_is_not(upstream, release,
                                                                        tmp_path):
    """A build killed before its rename leaves its .building-*.whl; the next build in that
    directory removes it (no process holds its flock), never one a running build holds."""
    import fcntl
    killed = tmp_path / ".building-killed.whl"
    killed.write_bytes(b"PK half a wheel")
    running = tmp_path / ".building-running.whl"
    running.write_bytes(b"PK")
    held = os.open(running, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a build at work holds its own
    try:
        proc = subprocess.run([*CLI, "wheel", release, "--from", str(upstream), "--out",
                               str(tmp_path)], capture_output=True, text=True, env=ENV)
    finally:
        os.close(held)
    assert proc.returncode == 0, proc.stderr
    built = Path(proc.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([built.name, running.name])


def test_wheel_is_readable_by_others_and_leaves_nothing_beside_it(upstream, release, tmp_path):
    """0644 under umask 022, as upstream's wheel beside it; no lock or temporary file."""
    out = tmp_path / "wheelhouse"
    proc = subprocess.run([*CLI, "wheel", release, "--from", str(upstream), "--out", str(out)],
                          capture_output=True, text=True, env=ENV,
                          preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0, proc.stderr
    built = Path(proc.stdout.strip().splitlines()[-1])
    assert built.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.iterdir()] == [built.name]
    assert f"--find-links {out} megatron-core=={release}" in proc.stderr
    assert "--force-reinstall --no-deps" in proc.stderr


def test_wheel_release_errors_say_what_to_give():
    from megatron_overlay.patching import wheel

    proc = cli("wheel", "v0.13.1", "--out", "/nonexistent/never-written", check_rc=2)
    assert "'v0.13.1' is not a megatron-core release: give it as X.Y.Z, e.g. 0.13.1" in (
        proc.stderr)
    pip_said = ("ERROR: Could not find a version that satisfies the requirement "
                "megatron-core==0.19.2 (from versions: 0.1.0, " + "0.16.0rc0.dev125825, " * 40
                + "0.19.2)\nERROR: No matching distribution found for megatron-core==0.19.2")
    message = wheel._download_failure("0.19.2", "3.11", pip_said)
    assert "(ERROR: No matching distribution found for megatron-core==0.19.2)" in message
    assert "dev125825" not in message
    assert "add --python-version 3.12" in message and "supported releases: 0.12.0" in message
    unknown = wheel._download_failure("9.9.9", "3.11", pip_said)
    assert "--python-version" not in unknown and "supported releases: 0.12.0" in unknown


# ---------------------------------------------------------------- installing it

def test_pip_pin_selects_the_wheel_and_force_reinstall_keeps_it(overlay_wheel, upstream,
                                                                release, tmp_path):
    """The user's own pin `megatron-core==X` picks X+overlay.2 from the wheelhouse, also
    next to upstream's wheel; --force-reinstall from there keeps it patched."""
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy(overlay_wheel, links)
    shutil.copy(upstream, links)
    python = make_venv(tmp_path / "env")
    for extra in ([], ["--force-reinstall"]):
        proc = pip(python, "install", "--no-deps", "--no-index", "--find-links", links,
                   *extra, f"megatron-core=={release}")
        assert proc.returncode == 0, proc.stderr
        ok, st, problems = patching.verify(site_of(python))
        assert ok, problems
        assert st.core_version == f"{release}+overlay.2"
    shown = pip(python, "show", "megatron-core")
    assert f"Version: {release}+overlay.2" in shown.stdout
    # another distribution's module in the megatron namespace (megatron-energon's
    # megatron/energon, say) outlives megatron-core's uninstall, as with upstream's wheel
    other = site_of(python) / "megatron" / "energon" / "other_dist.py"
    other.parent.mkdir()
    other.write_text("x = 1\n")
    removed = pip(python, "uninstall", "-y", "megatron-core")
    assert removed.returncode == 0, removed.stderr
    assert other.read_text() == "x = 1\n"
    assert not list(site_of(python).glob("megatron_core*"))
    assert [p.name for p in (site_of(python) / "megatron").iterdir()] == ["energon"]


def test_require_hashes_with_the_printed_requirement(overlay_wheel, upstream, release,
                                                     tmp_path):
    proc = cli("wheel", release, "--from", upstream, "--out", overlay_wheel.parent,
               "--print-requirement", check_rc=0)
    line, path = proc.stdout.strip().splitlines()[-2:]
    assert Path(path) == overlay_wheel
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(line + "\n")
    python = make_venv(tmp_path / "env")
    proc = pip(python, "install", "--no-deps", "--no-index", "--find-links",
               overlay_wheel.parent, "--require-hashes", "-r", requirements)
    assert proc.returncode == 0, proc.stderr
    assert patching.verify(site_of(python))[0]
    tampered = tmp_path / "tampered.txt"
    tampered.write_text(line[:-4] + "0000\n")
    proc = pip(python, "install", "--no-deps", "--no-index", "--find-links",
               overlay_wheel.parent, "--require-hashes", "--force-reinstall", "-r", tampered)
    assert proc.returncode != 0 and "HASH" in proc.stderr.upper()


def test_uv_installs_it_from_the_pin(overlay_wheel, release, tmp_path):
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not installed: it is in the test extras (setup.py)")
    python = make_venv(tmp_path / "env")
    proc = subprocess.run([uv, "pip", "install", "--python", str(python), "--no-deps",
                           "--offline", "--no-index", "--find-links", str(overlay_wheel.parent),
                           f"megatron-core=={release}"], capture_output=True, text=True,
                          env=NO_PYTHONPATH)
    assert proc.returncode == 0, proc.stderr
    ok, st, problems = patching.verify(site_of(python))
    assert ok, problems


def test_patched_core_runs_callables_without_the_overlay_and_names_say_how(overlay_wheel,
                                                                           tmp_path):
    site = unpack(overlay_wheel, tmp_path / "site")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
               PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(SUPPORT / "no_overlay_worker.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


# ---------------------------------------------------------------- patch sets by content

def test_a_release_with_identical_files_is_served_by_that_patch_set(tmp_path):
    """Yanked 0.18.1 ships 0.18.0's gpt_model.py byte for byte."""
    wheel = upstream_wheel_of("0.18.1", python_version="3.12")
    site = unpack(wheel, tmp_path / "site")
    before = tree_digest(site)
    st = patching.status(site)
    assert (st.state, st.name_lookup, st.same_files_as) == (patching.NATIVE, False, "0.18.0")
    assert cli("status", "--site", site, check_rc=1)
    out = cli("patch", "--site", site, check_rc=0).stdout
    assert "0.18.1+overlay.2" in out and "byte-identical to 0.18.0's" in out
    cli("unpatch", "--site", site, check_rc=0)
    assert tree_digest(site) == before
    built = Path(cli("wheel", "0.18.1", "--from", wheel, "--out", tmp_path / "wh",
                     check_rc=0).stdout.splitlines()[-1])
    assert built.name.startswith("megatron_core-0.18.1+overlay.2-cp312-")
    st = patching.status(unpack(built, tmp_path / "from-wheel"))
    assert st.ready and st.patch_set == "0.18.0+overlay.2"


def test_unknown_core_is_refused_with_a_nonzero_exit(core_copy, release):
    """Another version whose files match no patch set: refused, nothing written."""
    dist_info = next(core_copy.glob("*.dist-info"))
    meta = dist_info / "METADATA"
    meta.write_bytes(meta.read_bytes().replace(f"Version: {release}".encode(),
                                               b"Version: 0.99.0", 1))
    gpt = core_copy / patch_set_for(release).files[0].path
    gpt.write_bytes(gpt.read_bytes() + b"\n# not any release\n")
    before = tree_digest(core_copy)
    proc = cli("patch", "--site", core_copy, check_rc=2)
    assert "0.99.0 is not supported" in proc.stderr
    assert cli("status", "--site", core_copy).returncode == 1
    assert tree_digest(core_copy) == before


def test_two_dist_infos_or_no_version_are_refused_naming_them(core_copy, release):
    """A stale second megatron-core dist-info beside the real one (an interrupted pip
    run): refused, both named, nothing written (the first in the listing was patched and
    relabelled, the real one left with upstream's RECORD); a METADATA without Version: a
    one-line error, not a traceback."""
    dist_info = next(core_copy.glob("*.dist-info"))
    stale = dist_info.with_name("megatron_core-0.1.0.dist-info")
    shutil.copytree(dist_info, stale)
    meta = stale / "METADATA"
    meta.write_bytes(meta.read_bytes().replace(f"Version: {release}".encode(),
                                               b"Version: 0.1.0", 1))
    before = tree_digest(core_copy)
    for command, rc in (("patch", 2), ("status", 1), ("verify", 1)):
        proc = cli(command, "--site", core_copy, check_rc=rc)
        assert "holds 2 megatron-core distributions" in proc.stdout + proc.stderr, command
        assert f"{stale.name} (Version 0.1.0)" in proc.stdout + proc.stderr
    assert tree_digest(core_copy) == before
    shutil.rmtree(stale)
    meta = dist_info / "METADATA"
    meta.write_bytes(meta.read_bytes().replace(f"Version: {release}\n".encode(), b"", 1))
    for command, rc in (("status", 1), ("patch", 2)):
        proc = cli(command, "--site", core_copy, check_rc=rc)
        assert "METADATA has no Version" in proc.stdout + proc.stderr


def test_verify_says_when_there_is_no_record_to_check(core_copy):
    assert "hashes and RECORD agree" in cli("verify", "--site", core_copy, check_rc=0).stdout
    next(core_copy.glob("*.dist-info")).joinpath("RECORD").unlink()
    out = cli("verify", "--site", core_copy, check_rc=0).stdout
    assert "verify: OK (upstream's own files; hashes agree; no RECORD to check)" in out


def test_a_site_without_record_keeps_its_version_label_through_repeated_patches(core_copy):
    """No RECORD (a site pip did not write) and a local label of its own: a second patch
    removed the marker as a stray (nothing lists it) and wrote a new one without that
    label, so unpatch restored "X", not "X+site.1". Now every file comes back."""
    dist_info = next(core_copy.glob("*.dist-info"))
    dist_info.joinpath("RECORD").unlink()
    meta = dist_info / "METADATA"
    release = patching.status(core_copy).release
    meta.write_bytes(meta.read_bytes().replace(f"Version: {release}\n".encode(),
                                               f"Version: {release}+site.1\n".encode(), 1))
    before = tree_digest(core_copy)
    for command in ("patch", "patch", "status", "patch", "unpatch"):
        cli(command, "--site", core_copy, check_rc=0)
        if command != "unpatch":
            marker = json.loads((dist_info / patching.core.MARKER).read_text())
            assert marker["upstream_version"] == f"{release}+site.1"
    assert f"Version: {release}+site.1\n".encode() in meta.read_bytes()
    assert tree_digest(core_copy) == before
    # a marker beside an unlabelled version is still a stray there: the next patch drops it
    (dist_info / patching.core.MARKER).write_text("{}")
    assert "leftovers of an interrupted overlay run" in patching.status(core_copy).detail
    cli("patch", "--site", core_copy, check_rc=0)
    cli("unpatch", "--site", core_copy, check_rc=0)
    assert tree_digest(core_copy) == before


def test_cli_exit_codes_and_version(core_copy):
    assert "megatron-overlay 0." in cli("--version", check_rc=0).stdout
    cli("status", "--site", core_copy, check_rc=1)       # unpatched: not ready
    # upstream's own files, as they claim to be: verified
    assert "verify: OK (upstream's own files" in cli("verify", "--site", core_copy,
                                                     check_rc=0).stdout
    cli("patch", "--site", core_copy, check_rc=0)
    cli("status", "--site", core_copy, check_rc=0)
    cli("verify", "--site", core_copy, check_rc=0)
    cli("unpatch", "--site", core_copy, check_rc=0)
    cli("verify", "--site", core_copy, check_rc=0)
    cli("patch", "--site", core_copy, check_rc=0)
    target = next(core_copy.rglob("gpt_model.py"))
    target.write_bytes(target.read_bytes() + b"\n# edit\n")
    cli("status", "--site", core_copy, check_rc=1)       # modified
    cli("patch", "--site", core_copy, check_rc=2)        # refused


def test_patch_and_unpatch_say_whether_they_changed_anything(core_copy):
    files = [f.path for f in patch_set_for(patching.status(core_copy).release).files]
    status = cli("status", "--site", core_copy, check_rc=1).stdout
    if patching.status(core_copy).state == patching.UNPATCHED:
        assert "available, not applied" in status
    first = cli("patch", "--site", core_copy, check_rc=0).stdout
    assert first.startswith(f"patch: {len(files)} file(s) changed ({', '.join(files)})")
    again = json.loads(cli("patch", "--site", core_copy, "--json", check_rc=0).stdout)
    assert again["changed"] is False and again["status"]["name_lookup"] is True
    undone = json.loads(cli("unpatch", "--site", core_copy, "--json", check_rc=0).stdout)
    assert undone["changed"] is True and undone["changed_files"] == files
    assert cli("unpatch", "--site", core_copy, check_rc=0).stdout.startswith(
        "unpatch: nothing to do, nothing changed")
    verified = json.loads(cli("verify", "--site", core_copy, "--json", check_rc=0).stdout)
    assert verified["ok"] is True and verified["problems"] == []


def test_status_on_a_missing_directory_says_so(tmp_path):
    missing = tmp_path / "no-such-site"
    out = cli("status", "--site", missing, check_rc=1).stdout
    assert f"{missing}: no such directory" in out
    assert "no such directory" in cli("patch", "--site", missing, check_rc=2).stderr


# ---------------------------------------------------------------- every rank at once

def test_concurrent_patch_runs_wait_and_find_the_work_done(core_copy, tmp_path):
    expected = copy_tree(core_copy, tmp_path / "expected")
    patching.patch(expected)
    cmds = [["patch"]] * 8 + [["status"]] * 3 + [["verify"]] * 3
    procs = [subprocess.Popen([*CLI, *cmd, "--site", str(core_copy)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for cmd in cmds]
    results = [(cmd[0], p.wait(), *p.communicate()) for cmd, p in zip(cmds, procs)]
    for name, rc, out, err in results:
        assert "Traceback" not in err, err
        assert rc == 0 if name == "patch" else rc in (0, 1), (name, rc, out, err)
    # exactly one run did the work and says so; the others found it done
    said = [out.splitlines()[0] for name, _, out, _ in results if name == "patch"]
    assert sum("file(s) changed" in line for line in said) == 1, said
    assert said.count("patch: nothing to do, nothing changed") == 7, said
    ok, _, problems = patching.verify(core_copy)
    assert ok, problems
    assert tree_digest(core_copy) == tree_digest(expected)


# ---------------------------------------------------------------- a kill at every step

def minimal_site(release: str, dest: Path) -> Path:
    """Only what patching reads and writes: the dist-info and the patch set's files."""
    touched = {f.path for f in patch_set_for(release).files}
    with zipfile.ZipFile(upstream_wheel_of(release)) as whl:
        for name in whl.namelist():
            if name in touched or ".dist-info/" in name:
                whl.extract(name, dest)
    return dest


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def killed(k: int, command: str, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SUPPORT / "kill_at_step.py"), str(k), command,
                           "--site", str(site)], capture_output=True, text=True, env=ENV)


@pytest.mark.parametrize("command", ["patch", "unpatch"])
def test_a_kill_at_every_write_is_recovered(command, release, tmp_path):
    pristine = minimal_site(release, tmp_path / "pristine")
    start = copy_tree(pristine, tmp_path / "start")
    if command == "unpatch":
        patching.patch(start)
    count_run = killed(0, command, copy_tree(start, tmp_path / "count"))
    assert count_run.returncode == 0, count_run.stderr
    writes = int(count_run.stderr.strip().split("writes: ")[-1])
    assert writes >= 10
    for k in range(1, writes + 1):
        site = copy_tree(start, tmp_path / f"k{k}")
        assert killed(k, command, site).returncode == 9
        before = tree_digest(site)
        status = cli("status", "--site", site)  # reads only, never a traceback
        assert status.returncode in (0, 1)
        assert tree_digest(site) == before, f"status wrote after a kill at write {k}"
        cli("patch", "--site", site, check_rc=0)
        ok, _, problems = patching.verify(site)
        assert ok, (k, problems)
        cli("unpatch", "--site", site, check_rc=0)
        assert tree_digest(site) == tree_digest(pristine), f"kill at write {k}"
        assert not transaction.leftovers({p.parent for p in site.rglob("*")})
        shutil.rmtree(site)


def test_a_kill_under_a_relative_site_is_recovered_from_another_directory(release, tmp_path):
    """The journal names its targets absolutely: a run killed with --site given relative
    to one directory is rolled back by the next run from any other (it used to find no
    targets there, drop the journal and refuse the core as modified)."""
    pristine = minimal_site(release, tmp_path / "pristine")
    copy_tree(pristine, tmp_path / "count")
    count_run = subprocess.run([sys.executable, str(SUPPORT / "kill_at_step.py"), "0", "patch",
                                "--site", "count"], capture_output=True, text=True, env=ENV,
                               cwd=tmp_path)
    writes = int(count_run.stderr.strip().split("writes: ")[-1])
    site = copy_tree(pristine, tmp_path / "site")
    run = subprocess.run([sys.executable, str(SUPPORT / "kill_at_step.py"), str(writes // 2),
                          "patch", "--site", "site"], capture_output=True, text=True, env=ENV,
                         cwd=tmp_path)
    assert run.returncode == 9, run.stderr
    cli("patch", "--site", site, check_rc=0)  # from this process's directory, absolute
    ok, _, problems = patching.verify(site)
    assert ok, problems
    cli("unpatch", "--site", site, check_rc=0)
    assert tree_digest(site) == tree_digest(pristine)


def test_force_reinstall_after_a_kill_inherits_nothing(upstream, release, tmp_path):
    """A run killed mid-transaction, then `pip install --force-reinstall` of upstream:
    the reinstalled core is upstream, and the next patch cleans up and succeeds."""
    python = make_venv(tmp_path / "env")
    assert pip(python, "install", "--no-deps", upstream).returncode == 0
    site = site_of(python)
    writes = int(killed(0, "patch", copy_tree(site, tmp_path / "count")).stderr
                 .split("writes: ")[-1])
    for k in (writes // 3, writes // 2, 2 * writes // 3):
        assert killed(k, "patch", site).returncode == 9
        proc = pip(python, "install", "--no-deps", "--force-reinstall", upstream)
        assert proc.returncode == 0, proc.stderr
        st = patching.status(site)
        assert st.state in (patching.UNPATCHED, patching.NATIVE) and not st.name_lookup, st
        cli("patch", "--site", site, check_rc=0)
        ok, _, problems = patching.verify(site)
        assert ok, (k, problems)
        cli("unpatch", "--site", site, check_rc=0)


def test_an_editable_install_is_told_where_its_files_are(core_copy, release):
    """An editable / source install: the dist-info here, megatron/ elsewhere. Not "files
    differ, reinstall" (a force-reinstall would replace the user's checkout): the status
    says so and names the source; patch refuses, writing nothing."""
    source = core_copy.parent / "checkout"
    shutil.move(core_copy / "megatron", source / "megatron")
    dist_info = next(core_copy.glob("*.dist-info"))
    (dist_info / "direct_url.json").write_text(
        json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}}))
    before = tree_digest(core_copy)
    status = cli("status", "--site", core_copy, check_rc=1).stdout
    assert "an editable or source install (from file://" in status
    assert "force-reinstall" not in status
    refused = cli("patch", "--site", core_copy, check_rc=2).stderr
    assert "refusing to touch" in refused and "git apply" in refused
    assert "force-reinstall" not in refused
    assert tree_digest(core_copy) == before


def test_a_reader_that_goes_away_is_not_a_refusal(core_copy):
    """`patch | head`: once the reader has gone, the patch's report cannot be written; the
    exit code was 2 ("refused, nothing changed") after a finished patch. Now 141, as
    SIGPIPE would end it, and no error line; the core is patched."""
    command = " ".join(map(shlex.quote, [*CLI, "patch", "--site", str(core_copy)]))
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | true"],
                          capture_output=True, text=True, env=ENV)
    assert proc.returncode in (0, 141), (proc.returncode, proc.stderr)  # 0: wrote first
    assert "error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    ok, st, problems = patching.verify(core_copy)
    assert ok and st.ready, problems
