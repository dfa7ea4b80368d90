"""The patch sets shipped in ``patches/``: one per supported megatron-core release.

A release is served by its own patch set or, failing that, by the patch set whose files
it has byte for byte: yanked 0.18.1 and 0.19.1 ship 0.18.0's and 0.19.0's ``gpt_model.py``.
Matching by content, never by a version range, means an unknown core is refused rather
than patched on a guess.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from .errors import PatchError


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the site directory, e.g. megatron/core/models/gpt/gpt_model.py
    upstream_sha256: str
    patched_sha256: str


@dataclass(frozen=True)
class PatchSet:
    release: str  # the upstream megatron-core release, e.g. "0.13.1"
    patch_set_id: str  # e.g. "0.13.1+overlay.2"
    # GPTModel's hook: "backport" (pre-0.18: the hook is added) or "native" (name lookup only)
    hook: str
    files: tuple[FileEntry, ...]
    diff_text: str
    # model class -> "native" (upstream has the hook) or "backport" (this set adds it)
    models: tuple[tuple[str, str], ...] = ()


def _patches_dir():
    try:
        return importlib.resources.files("megatron_overlay._patches")
    except ModuleNotFoundError:  # running from a source checkout that was never installed
        return Path(__file__).resolve().parents[2] / "patches"


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


@lru_cache(maxsize=None)
def supported_releases() -> tuple[str, ...]:
    root = _patches_dir()
    found = [entry.name for entry in root.iterdir()
             if entry.is_dir() and entry.joinpath("manifest.json").is_file()]
    return tuple(sorted(found, key=_version_key))


@lru_cache(maxsize=None)
def find_patch_set(release: str | None) -> PatchSet | None:
    if release not in supported_releases():
        return None
    folder = _patches_dir().joinpath(release)
    try:
        manifest = json.loads(folder.joinpath("manifest.json").read_text())
        return PatchSet(
            release=manifest["release"],
            patch_set_id=manifest["patch_set"],
            hook=manifest["hook"],
            files=tuple(FileEntry(f["path"], f["upstream_sha256"], f["patched_sha256"])
                        for f in manifest["files"]),
            diff_text=folder.joinpath(manifest["patch"]).read_text(),
            models=tuple(manifest.get("models", {"GPTModel": manifest["hook"]}).items()),
        )
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as err:
        raise PatchError(f"the overlay's patch set for {release} ({folder}) is broken: "
                         f"{type(err).__name__}: {err}; reinstall megatron-overlay") from None


def _nearest_first(release: str | None) -> list[str]:
    """Supported releases, nearest to ``release`` first: older ones, then newer ones."""
    try:
        key = _version_key(release)
    except (AttributeError, TypeError, ValueError):
        key = ()
    older = [r for r in supported_releases() if _version_key(r) <= key]
    newer = [r for r in supported_releases() if _version_key(r) > key]
    return [*reversed(older), *newer]


def match_patch_set(release: str | None, sha256_of: Callable[[str], str | None]
                    ) -> PatchSet | None:
    """The patch set for ``release``: its own, else one whose every file is, byte for byte,
    the upstream or patched file now installed (``sha256_of(relative path)``); the nearest
    release first, older ones before newer (0.18.1 is served by 0.18.0's, not 0.18.2's).
    """
    own = find_patch_set(release)
    if own is not None:
        return own
    for candidate in _nearest_first(release):
        patch_set = find_patch_set(candidate)
        if all(sha256_of(f.path) in (f.upstream_sha256, f.patched_sha256)
               for f in patch_set.files):
            return patch_set
    return None


def nearest_mismatch(release: str | None, sha256_of: Callable[[str], str | None]
                     ) -> tuple[str, list[str]] | None:
    """For a core no patch set matches: the nearest supported release (older first, as
    :func:`match_patch_set` tries them) and which of its patch set's files differ."""
    candidates = _nearest_first(release)
    if not candidates:
        return None
    nearest = find_patch_set(candidates[0])
    return nearest.release, [f.path for f in nearest.files
                             if sha256_of(f.path) not in (f.upstream_sha256, f.patched_sha256)]
