"""Replace several files as one all-or-nothing step, surviving a kill at any point.

Protocol (the caller holds the site's exclusive lock, see ``lock.py``):

1. stage: write every new file beside its target (``<name>.overlay-new``, fsynced) and
   hard-link every original to ``<name>.overlay-bak``;
2. write the journal (atomically: a temporary file renamed into place). For each target
   it records the sha256 of the original and of the new content and the inode of each;
3. rename the staged files over their targets (or unlink the targets to be deleted);
4. delete the journal: the commit point;
5. drop the backups.

Recovery (:func:`recover`, run by every writing command before it looks at the core)
rolls an interrupted run back. A target is restored from its backup only while it is
still the very file this run put there (its inode is the staged file's); a target that is
still the original, or that something else replaced since (``pip install
--force-reinstall`` writes new files), is left alone, so a journal that outlived a
reinstall can never undo it. Staged files and backups with no journal to explain them are
leftovers of a run killed before its journal existed or after its commit point: they are
swept. Nothing here needs a backup to exist to make progress, and a target that cannot be
restored is reported, not raised on: the core is then judged "modified" and the fix is a
reinstall.

:func:`pending` answers, without writing, whether a journal would change anything: the
read-only ``status`` uses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

NEW_SUFFIX = ".overlay-new"
BAK_SUFFIX = ".overlay-bak"


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_journal(journal: Path) -> list[dict] | None:
    """The journal's entries; None when there is none. A journal is renamed into place
    whole, so one that does not parse was not written by this protocol: ignored."""
    try:
        return json.loads(journal.read_text())["targets"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return []


def _ours(entry: dict) -> bool:
    """Is the target still the file this run renamed (or deleted) into place?"""
    target = Path(entry["path"])
    if entry["new_sha256"] is None:  # a deletion: done when the target is gone
        return _inode(target) is None and entry["original_sha256"] is not None
    return _inode(target) == entry["new_inode"]


def pending(journal: Path) -> list[str]:
    """Targets an interrupted run left changed, which :func:`recover` would restore.
    Reads only."""
    return [entry["path"] for entry in _read_journal(journal) or [] if _ours(entry)]


def leftovers(directories) -> list[Path]:
    """Staged files and backups in ``directories`` (reads only)."""
    found: list[Path] = []
    for directory in directories:
        for suffix in (NEW_SUFFIX, BAK_SUFFIX):
            found += sorted(Path(directory).glob(f"*{suffix}"))
    return found


def recover(journal: Path, sweep_dirs=()) -> list[str]:
    """Roll back an interrupted :func:`replace_all` and sweep leftovers.

    Returns the targets that could not be restored (their backup is gone or differs);
    an empty list means the tree is as it was before the interrupted run (or, with no
    journal, untouched)."""
    entries = _read_journal(journal)
    unrestored: list[str] = []
    for entry in entries or []:
        target = Path(entry["path"])
        backup = _sibling(target, BAK_SUFFIX)
        if _ours(entry):
            if entry["original_sha256"] is None:
                target.unlink(missing_ok=True)
            elif _sha256(backup) == entry["original_sha256"]:
                os.replace(backup, target)
            else:
                unrestored.append(str(target))
        _sibling(target, NEW_SUFFIX).unlink(missing_ok=True)
        backup.unlink(missing_ok=True)
    directories = {Path(d) for d in sweep_dirs} | {Path(e["path"]).parent for e in entries or []}
    for stray in leftovers(directories):
        stray.unlink(missing_ok=True)
    if entries is not None:
        journal.unlink(missing_ok=True)
    for directory in directories | {journal.parent}:
        _fsync_dir(directory)
    return unrestored


def replace_all(changes: dict[Path, bytes | None], journal: Path) -> None:
    """Write every ``path -> bytes`` (``None`` deletes the path) atomically as a set."""
    targets = sorted(changes)
    unrestored = recover(journal, {t.parent for t in targets})
    if unrestored:
        raise OSError(f"an interrupted earlier run left files that cannot be restored: "
                      f"{', '.join(unrestored)}")
    entries = []
    try:
        for target in targets:
            data = changes[target]
            original = _sha256(target)
            if original is not None:
                backup = _sibling(target, BAK_SUFFIX)
                try:
                    os.link(target, backup)
                except OSError:
                    _write_synced(backup, target.read_bytes())
            staged = _sibling(target, NEW_SUFFIX)
            if data is not None:
                _write_synced(staged, data)
            entries.append({
                "path": str(target), "original_sha256": original,
                "new_sha256": None if data is None else hashlib.sha256(data).hexdigest(),
                "new_inode": None if data is None else _inode(staged)})
        tmp_journal = _sibling(journal, NEW_SUFFIX)
        _write_synced(tmp_journal, json.dumps({"targets": entries}, indent=1).encode())
        os.replace(tmp_journal, journal)
        _fsync_dir(journal.parent)

        for target in targets:
            if changes[target] is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(_sibling(target, NEW_SUFFIX), target)
        for directory in {t.parent for t in targets}:
            _fsync_dir(directory)
    except BaseException:
        recover(journal, {t.parent for t in targets})
        raise
    journal.unlink()  # commit point
    _fsync_dir(journal.parent)
    # Past the commit nothing may fail the call: a backup that cannot be dropped is a
    # leftover, which status reports and the next writer sweeps.
    with contextlib.suppress(OSError):
        for target in targets:
            _sibling(target, BAK_SUFFIX).unlink(missing_ok=True)
