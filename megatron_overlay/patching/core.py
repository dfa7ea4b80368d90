"""Find the installed megatron-core, tell its state, and patch or unpatch it.

Nothing here imports torch or megatron: the core is found through its distribution
metadata and judged by the sha256 of its files, so ``megatron-overlay status`` works on a
broken or half-installed environment too.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import re
import sys
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from . import lock, transaction, unified_diff
from .errors import DiffError, PatchError, os_error_reason
from .patch_sets import PatchSet, match_patch_set, nearest_mismatch, supported_releases

DIST_NAME = "megatron-core"
# PEP 440 local label: 0.13.1+overlay.2 still satisfies ==0.13.1. tools/make_patches.py
# writes it into the manifests; bumped whenever the patch sets change what they patch
# (overlay.2: the hybrid model class joined every set), so pip tells them apart.
LOCAL_LABEL = "overlay.2"
MARKER = "megatron_overlay.json"  # written into the dist-info of a patched core
JOURNAL = "megatron_overlay.journal"
GPT_MODEL = "megatron/core/models/gpt/gpt_model.py"


class State(StrEnum):
    """A core's state, named as `megatron-overlay status` prints it. A str: it compares
    equal to, formats as and serializes to JSON as its name."""

    NATIVE = "native"  # upstream has GPTModel's hook (0.18+)
    PATCHED = "patched"  # the overlay's patch set is applied
    UNPATCHED = "unpatched"  # upstream's own files; a patch set would add the hook
    MODIFIED = "modified"  # neither upstream's files nor patched ones, or an interrupted run
    UNSUPPORTED = "unsupported"  # no core, or files no patch set matches


NATIVE, PATCHED, UNPATCHED, MODIFIED, UNSUPPORTED = State


@dataclass
class Core:
    """One installed megatron-core distribution."""

    site: Path  # the directory that holds megatron/ and the dist-info
    dist_info: Path
    version: str  # as its METADATA says, local label included

    @property
    def release(self) -> str:
        return self.version.split("+", 1)[0]


@dataclass
class Status:
    core_version: str | None
    release: str | None
    state: State
    patch_set: str | None = None
    same_files_as: str | None = None  # served by this release's patch set (identical files)
    hook: str | None = None  # "backport" or "native"
    name_lookup: bool = False  # string processor names resolve on this core
    # model classes whose forward takes the hook in this state -> "native" or "back-ported"
    models: dict[str, str] = field(default_factory=dict)
    site: str | None = None
    detail: str = ""
    files: list[dict] = field(default_factory=list)
    # set by patch / unpatch: the files this very call rewrote (read under the writer's lock,
    # so a concurrent run that did the work first leaves it empty)
    changed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @property
    def ready(self) -> bool:
        """Patched, or native with the name lookup: every processor, callable or name, runs."""
        return self.state in (PATCHED, NATIVE) and self.name_lookup


def locate(site: str | os.PathLike | None = None) -> Core:
    """The megatron-core installed in ``site`` (default: the one this Python imports)."""
    if site is None:
        try:
            dist = importlib.metadata.distribution(DIST_NAME)
        except importlib.metadata.PackageNotFoundError:
            raise PatchError(
                "megatron-core is not installed in this environment; install it first, "
                "e.g. `pip install megatron-core==0.13.1`, then run `megatron-overlay patch`"
            ) from None
    else:
        found = _cores_in(site)
        if not found:
            if not Path(site).is_dir():
                raise PatchError(f"{site}: no such directory (--site takes the directory that "
                                 f"holds megatron/ and its dist-info, e.g. site-packages)")
            raise PatchError(f"no megatron-core distribution in {site}")
        dist = found[0]
    # PathDistribution: the .dist-info directory; absolute, as a run's journal records its
    # targets: a run killed under a relative --site is recovered from any directory
    dist_info = Path(dist._path).absolute()
    twins = found if site is not None else _cores_in(dist_info.parent)
    if len(twins) > 1:  # which one pip and importlib read depends on the directory's order
        names = ", ".join(sorted(f"{Path(d._path).name} (Version {d.metadata['Version']})"
                                 for d in twins))
        raise PatchError(f"{dist_info.parent} holds {len(twins)} megatron-core distributions "
                         f"({names}), and which one pip and Python read depends on the "
                         f"directory's order; remove the stale dist-info folder and "
                         f"reinstall megatron-core; nothing was changed")
    if not dist.version:
        raise PatchError(f"{dist_info}/METADATA has no Version: a damaged install; reinstall "
                         f"megatron-core; nothing was changed")
    return Core(site=dist_info.parent, dist_info=dist_info, version=dist.version)


def _cores_in(directory) -> list:
    """The megatron-core distributions whose metadata lies directly in ``directory``."""
    return [d for d in importlib.metadata.distributions(path=[str(directory)])
            if (d.metadata["Name"] or "").lower().replace("_", "-") == DIST_NAME]


def sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _source_has_native_hook(core: Core) -> bool:
    path = core.site / GPT_MODEL
    return path.exists() and "output_processor_context" in path.read_text(errors="replace")


def _patched_dirs(core: Core, patch_set: PatchSet | None) -> set[Path]:
    """Where a transaction stages files: the dist-info and the patched files' folders."""
    files = patch_set.files if patch_set is not None else ()
    return {core.dist_info} | {(core.site / f.path).parent for f in files}


def status(site: str | os.PathLike | None = None) -> Status:
    """Judge the installed core by its version and the hashes of the files a patch touches.

    Reads only. Waits for a running ``patch``/``unpatch`` on the same site to finish."""
    try:
        core = locate(site)
    except PatchError as err:
        return Status(None, None, UNSUPPORTED, detail=str(err))
    return lock.read_consistently(core.site, lambda: _judge(locate(site)))


def _judge(core: Core) -> Status:
    base = Status(core.version, core.release, UNSUPPORTED, site=str(core.site))
    patch_set = match_patch_set(core.release, lambda rel: sha256_of(core.site / rel))
    interrupted = transaction.pending(core.dist_info / JOURNAL)
    if patch_set is None:
        files = mismatch_note(core.release, lambda rel: sha256_of(core.site / rel))
        if _source_has_native_hook(core):
            base.state, base.hook = NATIVE, "native"
            base.models = {"GPTModel": "native"}
            base.detail = (f"megatron-core {core.release} is not supported by the overlay's "
                           f"name lookup: its files match no patch set{files} (supported: "
                           f"{', '.join(supported_releases())}). Its output_processor hook is "
                           f"built in, so processors passed as callables work; names do not "
                           f"resolve (upgrade megatron-overlay for them)")
        else:
            base.detail = (f"megatron-core {core.release} is not supported: its files match no "
                           f"patch set{files}; supported releases: "
                           f"{', '.join(supported_releases())}")
        return base

    base.patch_set, base.hook = patch_set.patch_set_id, patch_set.hook
    if patch_set.release != core.release:
        base.same_files_as = patch_set.release
    upstream = patched = True
    for entry in patch_set.files:
        actual = sha256_of(core.site / entry.path)
        state = ("upstream" if actual == entry.upstream_sha256 else
                 "patched" if actual == entry.patched_sha256 else "unknown")
        upstream &= state == "upstream"
        patched &= state == "patched"
        base.files.append({"path": entry.path, "sha256": actual, "matches": state})
    marked = (core.dist_info / MARKER).exists()
    labelled = core.version == f"{core.release}+{LOCAL_LABEL}"
    if interrupted:
        base.state = MODIFIED
        base.detail = (f"an overlay run was interrupted and left {', '.join(interrupted)} "
                       f"changed; `megatron-overlay patch` (or unpatch) rolls it back first")
    elif patched and marked and labelled:
        base.state = NATIVE if patch_set.hook == "native" else PATCHED
        base.name_lookup = True
        base.models = {cls: "native" if how == "native" else "back-ported"
                       for cls, how in patch_set.models}
    elif upstream and not labelled and not _marker_recorded(core):
        # a marker that RECORD does not list is a stray (left by a killed run or inherited
        # through a reinstall); the next writing command removes it
        base.state = NATIVE if patch_set.hook == "native" else UNPATCHED
        base.models = {cls: "native" for cls, how in patch_set.models if how == "native"}
    else:
        base.state = MODIFIED
        unknown = [f["path"] for f in base.files if f["matches"] == "unknown"]
        older = _older_patch_set(core, patch_set)
        base.detail = (
            _elsewhere(core, patch_set.release) if _files_elsewhere(base.files) else
            f"files differ from both upstream {patch_set.release} and its patched form: "
            f"{', '.join(unknown)}" if unknown else
            f"patched by an older megatron-overlay (patch set {older}; this one's is "
            f"{patch_set.patch_set_id})" if older else
            "the files and the distribution metadata disagree about whether the core is patched"
        )
    strays = transaction.leftovers(_patched_dirs(core, patch_set))
    if marked and base.state in (UNPATCHED, NATIVE) and not base.name_lookup:
        strays.append(core.dist_info / MARKER)
    if strays and not interrupted:
        note = (f"leftovers of an interrupted overlay run ({', '.join(p.name for p in strays)}); "
                f"the next `megatron-overlay patch` removes them")
        base.detail = f"{base.detail}; {note}" if base.detail else note
    return base


def _files_elsewhere(files: list[dict]) -> bool:
    """None of the patch set's files is in the site (an editable or source install)."""
    return all(f["sha256"] is None for f in files)


def _elsewhere(core: Core, patches_of: str) -> str:
    """The detail of a distribution whose patched files are not in its site: an editable or
    source install (pip's direct_url.json says where from, when it is there)."""
    try:
        url = json.loads((core.dist_info / "direct_url.json").read_text()).get("url")
    except (OSError, ValueError, AttributeError):
        url = None
    return (f"its files are not in {core.site}: an editable or source install"
            f"{f' (from {url})' if url else ''}, whose megatron/ lives elsewhere; the overlay "
            f"patches an installed core's files: install a wheel of the release (upstream's, "
            f"or the overlay's: `megatron-overlay wheel {core.release}`), or apply the "
            f"overlay's patches/{patches_of}/output_processor.patch to that checkout "
            f"(`git apply`)")


def _older_patch_set(core: Core, patch_set: PatchSet) -> str | None:
    """The patch set an older overlay recorded in the core's marker, if not this one."""
    try:
        recorded = json.loads((core.dist_info / MARKER).read_text()).get("patch_set")
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if recorded and recorded != patch_set.patch_set_id else None


def mismatch_note(release: str, sha_of) -> str:
    """" (<files> differ from <nearest release>'s)", for errors about unmatched cores."""
    nearest = nearest_mismatch(release, sha_of)
    if not nearest or not nearest[1]:
        return ""
    return f" ({', '.join(nearest[1])} differs from megatron-core {nearest[0]}'s)"


def _record_rows(record: Path) -> list[str]:
    """RECORD's rows, line ends kept."""
    try:
        return record.read_bytes().decode().splitlines(keepends=True)
    except UnicodeDecodeError as err:
        raise PatchError(f"{record} is not UTF-8 text ({err.reason} at byte {err.start}): "
                         f"reinstall megatron-core") from None


def _marker_recorded(core: Core) -> bool:
    record = core.dist_info / "RECORD"
    if not record.exists():
        return False
    marker_rel = (core.dist_info / MARKER).relative_to(core.site).as_posix()
    return any(row.split(",", 1)[0] == marker_rel for row in _record_rows(record))


def _marker_is_stray(core: Core) -> bool:
    """A marker RECORD does not list (left by a killed run or inherited through a
    reinstall). Where there is no RECORD (a site pip did not write), one beside a version
    without the overlay's label: a patched core's METADATA carries the label, and its
    marker keeps the upstream version that unpatch restores."""
    if not (core.dist_info / MARKER).exists():
        return False
    if (core.dist_info / "RECORD").exists():
        return not _marker_recorded(core)
    return core.version != f"{core.release}+{LOCAL_LABEL}"


def _check_writable(core: Core, patch_set: PatchSet) -> None:
    """Refuse before writing anything where a file, or a folder that gets staged files
    beside its targets, is read-only."""
    targets = [core.site / f.path for f in patch_set.files]
    for path in [*sorted(_patched_dirs(core, patch_set)), *targets]:
        if not os.access(path, os.W_OK):
            raise PatchError(f"cannot write {path}: run with permission to modify the environment")


def transformed(patch_set: PatchSet, read, reverse: bool = False) -> dict[str, bytes]:
    """Each file of the patch set, patched (or, ``reverse``, restored), from ``read(rel)``
    bytes that are either form; a result whose hash is not the manifest's is refused."""
    diffs = {d.path: d for d in unified_diff.parse(patch_set.diff_text)}
    out = {}
    for entry in patch_set.files:
        data = read(entry.path)
        have = hashlib.sha256(data).hexdigest()
        want = entry.upstream_sha256 if reverse else entry.patched_sha256
        if have != want:
            try:
                data = unified_diff.apply(data.decode(), diffs[entry.path],
                                          reverse=reverse).encode()
            except DiffError as err:
                raise PatchError(f"patch set {patch_set.patch_set_id} does not apply: {err}; "
                                 f"nothing changed") from None
            if hashlib.sha256(data).hexdigest() != want:
                raise PatchError(f"{entry.path}: the result has an unexpected hash; nothing changed")
        out[entry.path] = data
    return out


def with_version(metadata: bytes, version: str) -> bytes:
    """METADATA with its Version line set to ``version``."""
    return re.sub(rb"^Version: .*$", b"Version: " + version.encode(), metadata, count=1,
                  flags=re.M)


def marker_bytes(patch_set: PatchSet, release: str, upstream_version: str,
                 installed_from: str) -> bytes:
    """The marker file a patched core carries in its dist-info (deterministic bytes)."""
    marker = {"patch_set": patch_set.patch_set_id, "release": release,
              "same_files_as": patch_set.release if patch_set.release != release else None,
              "upstream_version": upstream_version, "hook": patch_set.hook,
              "installed_from": installed_from}
    return json.dumps(marker, indent=2).encode() + b"\n"


def record_row(rel: str, data: bytes, end: str = "\n") -> str:
    """A RECORD row as pip writes it: path, urlsafe-base64 sha256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}{end}"


def _line_end(row: str) -> str:
    return "\r\n" if row.endswith("\r\n") else "\n"


def _with_record(core: Core, changes: dict[Path, bytes | None]) -> dict[Path, bytes | None]:
    """``changes`` plus RECORD, its rows describing the changed files (added or dropped)."""
    record = core.dist_info / "RECORD"
    if not record.exists():
        return changes
    rows = _record_rows(record)
    by_path = {row.split(",", 1)[0]: i for i, row in enumerate(rows)}
    end = _line_end(rows[-1]) if rows else "\n"  # keep the file's own line ends
    for path, data in changes.items():
        rel = path.relative_to(core.site).as_posix()
        if data is None:
            if rel in by_path:
                rows[by_path[rel]] = ""
        elif rel in by_path:
            rows[by_path[rel]] = record_row(rel, data, _line_end(rows[by_path[rel]]))
        else:
            rows.append(record_row(rel, data, end))
    return {**changes, record: "".join(rows).encode()}


def _refresh_bytecode(paths: list[Path]) -> None:
    """Drop every cached .pyc of the changed sources and compile the one this Python reads,
    unless that folder's cache is another interpreter's alone (patching, say, a Python 3.12
    site from 3.11: a cpython-311 .pyc there is one upstream's install never had; 3.12
    compiles its own on the next import).

    Runs after the commit, so it never fails the command: a cache that cannot be written
    is only slower imports, as Python checks the source's mtime and size recorded in a .pyc
    and ignores a stale one."""
    ours = sys.implementation.cache_tag
    for path in paths:
        if path.suffix != ".py":
            continue
        with contextlib.suppress(OSError):
            cache = path.parent / "__pycache__"
            # whose cache this is: the tags of every module's .pyc there (NAME.TAG[.opt-N].pyc)
            tags = {pyc.name.split(".")[1] for pyc in cache.glob("*.pyc")}
            for stale in cache.glob(f"{path.stem}.*.pyc"):
                stale.unlink(missing_ok=True)
            if tags and ours not in tags:
                continue
            py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)),
                               doraise=True)


def _writable_patch_set(current: Status) -> PatchSet:
    """The patch set to patch or unpatch with; refuses unknown, mixed or interrupted files."""
    if current.patch_set is None:
        raise PatchError(current.detail)
    patch_set = match_patch_set(current.release, lambda rel: sha256_of(Path(current.site) / rel))
    forms = {f["matches"] for f in current.files}
    if _files_elsewhere(current.files):  # an editable / source install
        raise PatchError(f"refusing to touch megatron-core {current.release}: "
                         f"{current.detail}; nothing was changed")
    if "unknown" in forms or len(forms) > 1:
        raise PatchError(
            f"refusing to touch megatron-core {current.release} in {current.site}: "
            f"{current.detail or 'some files are patched and some are not'}. Reinstall it "
            f"(`pip install --force-reinstall --no-deps megatron-core=={current.release}`) "
            f"and patch again; nothing was changed")
    return patch_set


@contextlib.contextmanager
def _writing(site):
    """Hold the site's lock exclusively; roll back interrupted runs and drop leftovers
    first; yield the core as it is then. A filesystem error on the way is a PatchError."""
    core = locate(site)
    try:
        with lock.exclusive(core.site):
            core = locate(site)  # another writer may have changed it while we waited
            patch_set = match_patch_set(core.release, lambda rel: sha256_of(core.site / rel))
            unrestored = transaction.recover(core.dist_info / JOURNAL,
                                             _patched_dirs(core, patch_set))
            if unrestored:
                raise PatchError(
                    f"an interrupted overlay run left {', '.join(unrestored)} changed and its "
                    f"backup is gone. Reinstall megatron-core (`pip install --force-reinstall "
                    f"--no-deps megatron-core=={core.release}`); nothing else was changed")
            if _marker_is_stray(core):
                (core.dist_info / MARKER).unlink()
            yield locate(site)
    except OSError as err:
        # replace_all rolls back what it wrote before it raises (and where it cannot, its
        # journal has the next writing run do it)
        raise PatchError(f"cannot modify megatron-core in {core.site}: {os_error_reason(err)}. "
                         f"Run with permission to modify this environment; `megatron-overlay "
                         f"status` tells the core's state") from err


def _rewrite(site, core: Core, current: Status, patch_set: PatchSet, *, reverse: bool,
             version: str, marker: bytes | None) -> Status:
    """One transaction: the patch set's files patched (``reverse``: restored), METADATA's
    version set to ``version``, the marker written (None: removed), RECORD to match.
    Returns the state after, with the files this call changed."""
    _check_writable(core, patch_set)
    files = transformed(patch_set, lambda rel: (core.site / rel).read_bytes(), reverse=reverse)
    changes: dict[Path, bytes | None] = {core.site / rel: data for rel, data in files.items()}
    changes[core.dist_info / "METADATA"] = with_version(
        (core.dist_info / "METADATA").read_bytes(), version)
    changes[core.dist_info / MARKER] = marker
    transaction.replace_all(_with_record(core, changes), core.dist_info / JOURNAL)
    _refresh_bytecode(list(changes))
    after = _judge(locate(site))
    after.changed = [f["path"] for f, was in zip(after.files, current.files)
                     if f["sha256"] != was["sha256"]]
    return after


def patch(site: str | os.PathLike | None = None) -> Status:
    """Patch the core. Idempotent; all-or-nothing; refuses unknown or modified files.
    Concurrent calls on one site serialize; the later ones find the work done."""
    with _writing(site) as core:
        current = _judge(core)
        if current.ready:
            return current
        if current.state == NATIVE and current.patch_set is None:
            raise PatchError(current.detail)  # a native release no patch set matches
        patch_set = _writable_patch_set(current)
        labelled = core.version == f"{core.release}+{LOCAL_LABEL}"
        marker = marker_bytes(patch_set, core.release,
                              core.release if labelled else core.version, "patch")
        return _rewrite(site, core, current, patch_set, reverse=False,
                        version=f"{core.release}+{LOCAL_LABEL}", marker=marker)


def unpatch(site: str | os.PathLike | None = None) -> Status:
    """Restore the byte-identical upstream files and metadata. Idempotent."""
    with _writing(site) as core:
        current = _judge(core)
        if current.state == UNPATCHED or (current.state == NATIVE and not current.name_lookup):
            return current
        patch_set = _writable_patch_set(current)
        try:
            marker = json.loads((core.dist_info / MARKER).read_text())
        except (OSError, ValueError):
            marker = None
        if not isinstance(marker, dict):
            marker = {}
        if marker.get("installed_from") == "wheel":
            raise PatchError(
                f"megatron-core {core.version} was installed from the overlay's wheel; go back "
                f"to upstream by installing upstream's: `pip install --force-reinstall "
                f"--no-deps megatron-core=={core.release}` from an index without the overlay's "
                f"wheelhouse; nothing was changed")
        return _rewrite(site, core, current, patch_set, reverse=True,
                        version=marker.get("upstream_version", core.release), marker=None)


def verify(site: str | os.PathLike | None = None) -> tuple[bool, Status, list[str]]:
    """Is the core wholly in the state it claims (patched, or native with the name lookup;
    or upstream's own: unpatched, or native without it), and does RECORD tell the truth?
    Reads only. Readiness for processors is ``status(...).ready``."""
    try:
        core = locate(site)
    except PatchError as err:
        return False, Status(None, None, UNSUPPORTED, detail=str(err)), [str(err)]

    def check() -> tuple[bool, Status, list[str]]:
        core = locate(site)
        current = _judge(core)
        problems: list[str] = []
        upstream_form = current.state == UNPATCHED or (current.state == NATIVE
                                                       and not current.name_lookup)
        if current.patch_set is None:  # a release no patch set knows: nothing to check by
            return False, current, [current.detail]
        if not (current.ready or upstream_form):
            problems.append(f"state is {current.state}: neither {PATCHED} (or {NATIVE} with "
                            f"the overlay's name lookup) nor upstream's own files"
                            f"{': ' + current.detail if current.detail else ''}")
            return False, current, problems
        record = core.dist_info / "RECORD"
        if record.exists():
            rows = {r.split(",", 1)[0]: r.rstrip("\r\n") for r in _record_rows(record)}
            checked = [core.site / f["path"] for f in current.files] + [
                core.dist_info / "METADATA"]
            if current.ready:
                checked.append(core.dist_info / MARKER)
            for path in checked:
                rel = path.relative_to(core.site).as_posix()
                if rows.get(rel) != record_row(rel, path.read_bytes(), end=""):
                    problems.append(f"RECORD row for {rel} does not match the file")
        patch_set = match_patch_set(core.release, lambda rel: sha256_of(core.site / rel))
        for path in transaction.leftovers(_patched_dirs(core, patch_set)):
            problems.append(f"leftover of an interrupted run: {path}")
        if upstream_form and (core.dist_info / MARKER).exists():
            problems.append(f"a stray overlay marker: {core.dist_info / MARKER}")
        return not problems, current, problems

    return lock.read_consistently(core.site, check)
