"""Build a patched megatron-core wheel: ``megatron_core-X+overlay.2-<upstream tags>.whl``.

Clusters pin one release and rebuild images from lockfiles; patching site-packages after
the package manager is done does not survive ``pip install --force-reinstall``, ``uv
sync`` or a hash-pinned requirements file. A wheel does: patch once when the image is
built, then let pip or uv install it like any other package. Its version carries the PEP
440 local label, so the users' own pin ``megatron-core==X`` selects it from a
``--find-links`` wheelhouse.

The upstream wheel is checked before anything is written: its name and version, and the
sha256 of every file the patch set touches (an unknown release, or files that differ from
the release's, are refused, naming the file). The result is reproducible: entries keep
upstream's order, timestamps and attributes; only the patched files, METADATA's Version
line, the dist-info's name, the overlay's marker and RECORD change.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .core import (LOCAL_LABEL, MARKER, mismatch_note, marker_bytes, record_row, transformed,
                   with_version)
from .errors import PatchError, os_error_reason
from .patch_sets import match_patch_set, supported_releases

WHEEL_NAME = "megatron_core"  # the distribution's name as wheel file names spell it
_FILENAME = re.compile(r"^megatron_core-(?P<version>[^-]+)-(?P<tags>.+)\.whl$")


_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


def download(release: str, dest: Path, python_version: str | None = None,
             platform: str | None = None) -> Path:
    """Upstream's wheel of ``release`` for this Python (or the one named), with pip."""
    if not _RELEASE.match(release):
        example = release.lstrip("vV") if _RELEASE.match(release.lstrip("vV")) else "0.13.1"
        raise PatchError(f"{release!r} is not a megatron-core release: give it as X.Y.Z, e.g. "
                         f"{example} (supported: {', '.join(supported_releases())})")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
           "--no-deps", "--only-binary=:all:", "--dest", str(dest),
           f"megatron-core=={release}"]
    if python_version:
        cmd += ["--python-version", python_version]
    if platform:
        cmd += ["--platform", platform]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob(f"{WHEEL_NAME}-{release}-*.whl"))
    if proc.returncode != 0 or not found:
        raise PatchError(_download_failure(release, python_version,
                                           (proc.stderr or proc.stdout).strip()))
    return found[0]


def _download_failure(release: str, python_version: str | None, pip_output: str) -> str:
    """What went wrong, in one message: pip's own error line, not its list of versions."""
    errors = [line for line in pip_output.splitlines() if line.startswith("ERROR:")]
    said = errors[-1] if errors else pip_output[-300:]
    python = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    hint = f"supported releases: {', '.join(supported_releases())}"
    minor = tuple(int(p) for p in release.split(".")[:2])
    newest = max(tuple(int(p) for p in r.split(".")[:2]) for r in supported_releases())
    if (0, 17) <= minor <= newest and tuple(int(p) for p in python.split(".")[:2]) < (3, 12):
        hint = (f"megatron-core {release} publishes Python 3.12 wheels only and this is "
                f"Python {python}: add --python-version 3.12 (the wheel is built for it, "
                f"not run here); {hint}")
    return (f"could not download upstream's megatron-core=={release} wheel for Python "
            f"{python} with pip ({said}); {hint}; or pass --from UPSTREAM.whl")


def _dist_info(names: list[str]) -> str:
    found = {n.split("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA")
             and n.count("/") == 1}
    if len(found) != 1:
        raise PatchError(f"not a wheel with one .dist-info: found {sorted(found) or 'none'}")
    return found.pop()


def _metadata_field(metadata: bytes, field: str) -> str | None:
    match = re.search(rb"^" + field.encode() + rb": (.*)$", metadata, flags=re.M)
    return match.group(1).decode().strip() if match else None


def build(release: str, source: Path, out_dir: Path) -> Path:
    """Write the patched wheel of ``release`` built from upstream's ``source`` wheel into
    ``out_dir``; returns its path. Writes nothing when the source is refused."""
    match = _FILENAME.match(source.name)
    if match is None:
        raise PatchError(f"{source.name} is not a megatron-core wheel file name "
                         f"(megatron_core-<version>-<tags>.whl)")
    try:
        with zipfile.ZipFile(source) as upstream:
            infos = upstream.infolist()
            contents = {info.filename: upstream.read(info) for info in infos}
    except OSError as err:
        raise PatchError(f"cannot read the upstream wheel: {os_error_reason(err)}; "
                         f"nothing was written") from None
    except zipfile.BadZipFile as err:
        raise PatchError(f"{source} is not a readable wheel (zip) file ({err}); nothing was "
                         f"written") from None
    old_info = _dist_info(list(contents))
    metadata = contents[f"{old_info}/METADATA"]
    name = (_metadata_field(metadata, "Name") or "").lower().replace("_", "-")
    version = _metadata_field(metadata, "Version")
    if name != "megatron-core" or version != release or match["version"] != release:
        raise PatchError(f"{source.name} holds {name or '?'} {version or '?'}, not upstream "
                         f"megatron-core {release}; nothing was written")

    def sha_of(rel: str) -> str | None:
        data = contents.get(rel)
        return None if data is None else hashlib.sha256(data).hexdigest()

    patch_set = match_patch_set(release, sha_of)
    if patch_set is None:
        files = mismatch_note(release, sha_of)
        raise PatchError(f"megatron-core {release} is not supported: its files match no patch "
                         f"set{files} (supported: {', '.join(supported_releases())}); nothing "
                         f"was written")
    for entry in patch_set.files:
        if sha_of(entry.path) != entry.upstream_sha256:
            raise PatchError(f"{source.name}: {entry.path} differs from upstream megatron-core "
                             f"{patch_set.release}'s; refusing to build from a modified wheel; "
                             f"nothing was written")

    version = f"{release}+{LOCAL_LABEL}"
    new_info = f"{WHEEL_NAME}-{version}.dist-info"
    changed = dict(transformed(patch_set, contents.__getitem__))
    changed[f"{old_info}/METADATA"] = with_version(metadata, version)
    marker_rel = f"{old_info}/{MARKER}"
    changed[marker_rel] = marker_bytes(patch_set, release, release, "wheel")
    record_rel = f"{old_info}/RECORD"
    rename = lambda rel: new_info + rel[len(old_info):] if rel.startswith(old_info + "/") else rel  # noqa: E731

    # Entries in upstream's order, the marker just before RECORD, which stays last.
    order = [i for i in infos if i.filename != record_rel]
    order.append(_clone(_entry(infos, f"{old_info}/METADATA"), marker_rel))
    record_info = _entry(infos, record_rel)
    # files only, as upstream's RECORD: a directory's row would make pip's uninstall remove
    # the whole directory, other distributions' files in it too (megatron/energon, say)
    rows = [record_row(rename(i.filename), changed.get(i.filename, contents.get(i.filename, b"")))
            for i in order if not i.is_dir()]
    record = "".join(rows) + f"{rename(record_rel)},,\n"
    changed[record_rel] = record.encode()
    order.append(record_info)

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{WHEEL_NAME}-{version}-{match['tags']}.whl"
    # No lock: concurrent builds write the same bytes, each to its own temporary file, and
    # the rename is atomic (readers see the old wheel or the whole new one). Each build
    # holds flock on its temporary file, so that a build killed before its rename leaves a
    # file no one holds, which the next build in this directory removes.
    descriptor, tmp = _held_temporary(out_dir)
    try:
        _sweep_killed_builds(out_dir)
        with zipfile.ZipFile(tmp, "w") as wheel:
            for info in order:
                data = changed.get(info.filename, contents.get(info.filename))
                wheel.writestr(_clone(info, rename(info.filename)), data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from other users
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
        os.close(descriptor)  # releases the flock
    return target


_BUILDING = ".building-"


def _held_temporary(out_dir: Path) -> tuple[int, Path]:
    """A new ``.building-*.whl`` in ``out_dir`` and its descriptor, holding flock on it.
    Between mkstemp and flock a sweeping build may take the new file for a killed one and
    remove it: then the name no longer leads to our file, and we take another."""
    while True:
        descriptor, name = tempfile.mkstemp(dir=out_dir, prefix=_BUILDING, suffix=".whl")
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        if _names(Path(name), descriptor):
            return descriptor, Path(name)
        os.close(descriptor)


def _sweep_killed_builds(out_dir: Path) -> None:
    """Remove the temporary files of builds killed before their rename: those whose flock
    no process holds (a running build holds its own until it has renamed it)."""
    for path in out_dir.glob(f"{_BUILDING}*.whl"):
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except OSError:  # renamed or removed meanwhile, or not ours to read
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a build at work
            os.close(descriptor)
            continue
        try:  # unheld: its build was killed; still the file we locked, so remove it
            if _names(path, descriptor):
                path.unlink()
        except OSError:  # removed meanwhile, or not ours to remove
            pass
        finally:
            os.close(descriptor)


def _names(path: Path, descriptor: int) -> bool:
    """Whether ``path`` still leads to the file open as ``descriptor``."""
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _entry(infos: list[zipfile.ZipInfo], name: str) -> zipfile.ZipInfo:
    for info in infos:
        if info.filename == name:
            return info
    raise PatchError(f"the wheel has no {name}")


def _clone(info: zipfile.ZipInfo, filename: str) -> zipfile.ZipInfo:
    """A new entry named ``filename`` with ``info``'s timestamp, compression and mode bits
    (nothing from this machine or this moment: the build is reproducible)."""
    clone = zipfile.ZipInfo(filename, date_time=info.date_time)
    clone.compress_type, clone.external_attr = info.compress_type, info.external_attr
    clone.create_system = info.create_system
    return clone


def requirement_line(path: Path) -> str:
    """A hash-pinned requirements line for the built wheel."""
    version = _FILENAME.match(path.name)["version"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return f"megatron-core=={version} --hash=sha256:{digest}"
