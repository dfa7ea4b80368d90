"""Find the installed megatron-core, tell its state, and apply or revert a patch set.

Nothing here imports torch or megatron: the core is found through its distribution
metadata and judged by the sha256 of its files, so ``megatron-overlay status`` works on a
broken or half-installed environment too.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import unified_diff
from .patch_sets import PatchSet, find_patch_set, supported_releases
from .transaction import BAK_SUFFIX, NEW_SUFFIX, recover, replace_all

DIST_NAME = "megatron-core"
LOCAL_LABEL = "overlay.1"  # PEP 440 local label: 0.13.1+overlay.1 still satisfies ==0.13.1
MARKER = "megatron_overlay.json"  # written into the dist-info of a patched core
JOURNAL = "megatron_overlay.journal"
GPT_MODEL = "megatron/core/models/gpt/gpt_model.py"

# state names, as `megatron-overlay status` prints them
NATIVE, PATCHED, UNPATCHED, MODIFIED, UNSUPPORTED = (
    "native", "patched", "unpatched", "modified", "unsupported")


class PatchError(RuntimeError):
    """The core cannot be patched or restored as asked; nothing was changed."""


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
    state: str
    patch_set: str | None = None
    hook: str | None = None  # "backport" or "native"
    name_lookup: bool = False  # string processor names resolve on this core
    site: str | None = None
    detail: str = ""
    files: list[dict] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


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
        found = [d for d in importlib.metadata.distributions(path=[str(site)])
                 if (d.metadata["Name"] or "").lower().replace("_", "-") == DIST_NAME]
        if not found:
            raise PatchError(f"no megatron-core distribution in {site}")
        dist = found[0]
    dist_info = Path(dist._path)  # PathDistribution: the .dist-info directory
    return Core(site=dist_info.parent, dist_info=dist_info, version=dist.version)


def sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _source_has_native_hook(core: Core) -> bool:
    path = core.site / GPT_MODEL
    return path.exists() and "output_processor_context" in path.read_text(errors="replace")


def status(site: str | os.PathLike | None = None) -> Status:
    """Judge the installed core by its version and the hashes of the files a patch touches."""
    try:
        core = locate(site)
    except PatchError as err:
        return Status(None, None, UNSUPPORTED, detail=str(err))
    recover(core.dist_info / JOURNAL)
    base = Status(core.version, core.release, UNSUPPORTED, site=str(core.site))
    patch_set = find_patch_set(core.release)
    if patch_set is None:
        if _source_has_native_hook(core):
            base.state, base.hook = NATIVE, "native"
            base.detail = ("output_processor is built in; this release has no overlay patch set, "
                           "so processors are passed as callables, not names")
        else:
            base.detail = (f"megatron-core {core.release} is not supported; supported releases: "
                           f"{', '.join(supported_releases())}")
        return base

    base.patch_set, base.hook = patch_set.patch_set_id, patch_set.hook
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
    if patched and marked and labelled:
        base.state = NATIVE if patch_set.hook == "native" else PATCHED
        base.name_lookup = True
    elif upstream and not marked and not labelled:
        base.state = NATIVE if patch_set.hook == "native" else UNPATCHED
    else:
        base.state = MODIFIED
        unknown = [f["path"] for f in base.files if f["matches"] == "unknown"]
        base.detail = (
            f"files differ from both upstream {core.release} and its patched form: "
            f"{', '.join(unknown)}" if unknown else
            "the files and the distribution metadata disagree about whether the core is patched"
        )
    return base


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _check_writable(core: Core, patch_set: PatchSet) -> None:
    for path in [core.dist_info, *(core.site / f.path for f in patch_set.files)]:
        if not os.access(path, os.W_OK):
            raise PatchError(f"cannot write {path}: run with permission to modify the environment")


def _metadata_changes(core: Core, new_version: str, marker: dict | None) -> dict[Path, bytes | None]:
    """METADATA's Version line, the marker file and RECORD rows that describe them."""
    changes: dict[Path, bytes | None] = {}
    metadata_path = core.dist_info / "METADATA"
    text = metadata_path.read_bytes()
    pattern = re.compile(rb"^Version: .*$", re.M)
    changes[metadata_path] = pattern.sub(b"Version: " + new_version.encode(), text, count=1)
    marker_path = core.dist_info / MARKER
    changes[marker_path] = (json.dumps(marker, indent=2).encode() + b"\n") if marker else None
    return changes


def _rewrite_record(core: Core, changes: dict[Path, bytes | None], original_rows: dict | None,
                    ) -> dict[Path, bytes | None]:
    """RECORD rows for changed files: fresh hashes when patching, the originals when reverting."""
    record = core.dist_info / "RECORD"
    if not record.exists():
        return {}
    rows = record.read_bytes().decode().splitlines(keepends=True)
    by_path = {row.split(",", 1)[0]: i for i, row in enumerate(rows)}
    marker_rel = (core.dist_info / MARKER).relative_to(core.site).as_posix()
    for path, data in changes.items():
        rel = path.relative_to(core.site).as_posix()
        if original_rows is not None:  # reverting: rows exactly as pip wrote them
            if rel in original_rows and rel in by_path:
                rows[by_path[rel]] = original_rows[rel]
        elif data is not None and rel in by_path:
            rows[by_path[rel]] = f"{rel},{_record_hash(data)},{len(data)}\n"
    if original_rows is not None:
        rows = [r for r in rows if r.split(",", 1)[0] != marker_rel]
    else:
        marker_data = changes.get(core.dist_info / MARKER)
        if marker_data is not None and marker_rel not in by_path:
            rows.append(f"{marker_rel},{_record_hash(marker_data)},{len(marker_data)}\n")
    return {record: "".join(rows).encode()}


def _refresh_bytecode(core: Core, paths: list[Path]) -> None:
    """Drop every cached .pyc of the changed sources and compile the one this Python reads."""
    for path in paths:
        if path.suffix != ".py":
            continue
        cache = path.parent / "__pycache__"
        for stale in cache.glob(f"{path.stem}.*.pyc"):
            stale.unlink(missing_ok=True)
        py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)),
                           doraise=True)


def _original_rows(core: Core, patch_set: PatchSet) -> dict[str, str]:
    record = core.dist_info / "RECORD"
    if not record.exists():
        return {}
    wanted = {f.path for f in patch_set.files} | {
        (core.dist_info / "METADATA").relative_to(core.site).as_posix()}
    return {row.split(",", 1)[0]: row for row in record.read_bytes().decode().splitlines(keepends=True)
            if row.split(",", 1)[0] in wanted}


def _require_patch_set(current: Status) -> PatchSet:
    if current.state == UNSUPPORTED:
        raise PatchError(current.detail)
    patch_set = find_patch_set(current.release)
    if patch_set is None:  # native core without a patch set: nothing to do
        raise PatchError(current.detail)
    if current.state == MODIFIED:
        raise PatchError(
            f"refusing to touch megatron-core {current.release} in {current.site}: "
            f"{current.detail}. Reinstall it (`pip install --force-reinstall --no-deps "
            f"megatron-core=={current.release}`) and patch again; nothing was changed")
    return patch_set


def apply(site: str | os.PathLike | None = None) -> Status:
    """Patch the core. Idempotent; all-or-nothing; refuses unknown or modified files."""
    current = status(site)
    if current.name_lookup:  # patched already (or native with the lookup): nothing to do
        return current
    if current.state == NATIVE and find_patch_set(current.release) is None:
        return current  # a native release the overlay has no patch set for
    patch_set = _require_patch_set(current)
    core = locate(site)
    _check_writable(core, patch_set)

    diffs = {d.path: d for d in unified_diff.parse(patch_set.diff_text)}
    changes: dict[Path, bytes | None] = {}
    for entry in patch_set.files:
        path = core.site / entry.path
        new = unified_diff.apply(path.read_bytes().decode(), diffs[entry.path]).encode()
        if hashlib.sha256(new).hexdigest() != entry.patched_sha256:
            raise PatchError(f"{entry.path}: patch result has an unexpected hash; nothing changed")
        changes[path] = new
    marker = {"patch_set": patch_set.patch_set_id, "release": patch_set.release,
              "upstream_version": core.version,
              "hook": patch_set.hook, "record_rows": _original_rows(core, patch_set)}
    changes.update(_metadata_changes(core, f"{core.release}+{LOCAL_LABEL}", marker))
    changes.update(_rewrite_record(core, changes, None))
    replace_all(changes, core.dist_info / JOURNAL)
    _refresh_bytecode(core, list(changes))
    return status(site)


def revert(site: str | os.PathLike | None = None) -> Status:
    """Restore the byte-identical upstream files and metadata. Idempotent."""
    current = status(site)
    if current.state == UNPATCHED or (current.state == NATIVE and not current.name_lookup):
        return current
    patch_set = _require_patch_set(current)
    core = locate(site)
    _check_writable(core, patch_set)
    marker = json.loads((core.dist_info / MARKER).read_text())

    diffs = {d.path: d for d in unified_diff.parse(patch_set.diff_text)}
    changes: dict[Path, bytes | None] = {}
    for entry in patch_set.files:
        path = core.site / entry.path
        old = unified_diff.apply(path.read_bytes().decode(), diffs[entry.path], reverse=True).encode()
        if hashlib.sha256(old).hexdigest() != entry.upstream_sha256:
            raise PatchError(f"{entry.path}: reverting gives an unexpected hash; nothing changed")
        changes[path] = old
    changes.update(_metadata_changes(core, marker["upstream_version"], None))
    changes.update(_rewrite_record(core, changes, marker["record_rows"]))
    replace_all(changes, core.dist_info / JOURNAL)
    _refresh_bytecode(core, list(changes))
    return status(site)


def verify(site: str | os.PathLike | None = None) -> tuple[bool, Status, list[str]]:
    """Is the core patched (or native with the name lookup) and does RECORD tell the truth?"""
    current = status(site)
    problems: list[str] = []
    if current.state not in (PATCHED, NATIVE) or not current.name_lookup:
        problems.append(f"state is {current.state}, expected {PATCHED} (or {NATIVE} with the "
                        f"overlay's name lookup){': ' + current.detail if current.detail else ''}")
    else:
        core = locate(site)
        record = core.dist_info / "RECORD"
        if record.exists():
            rows = {r.split(",", 1)[0]: r.strip().split(",") for r in record.read_bytes().decode().splitlines()}
            for path in [core.site / f["path"] for f in current.files] + [
                    core.dist_info / "METADATA", core.dist_info / MARKER]:
                rel = path.relative_to(core.site).as_posix()
                row = rows.get(rel)
                if row is None or row[1] != _record_hash(path.read_bytes()):
                    problems.append(f"RECORD row for {rel} does not match the file")
        for path in core.site.joinpath("megatron").rglob(f"*{BAK_SUFFIX}"):
            problems.append(f"leftover backup {path}")
        for path in core.site.joinpath("megatron").rglob(f"*{NEW_SUFFIX}"):
            problems.append(f"leftover staged file {path}")
    return not problems, current, problems
