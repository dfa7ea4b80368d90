"""Replace several files as one all-or-nothing step, surviving interruption.

Protocol: stage every new file beside its target (``<name>.overlay-new``) and hard-link
every original to ``<name>.overlay-bak``; write a journal naming them; rename the staged
files over their targets; delete the journal (the commit point); drop the backups.
If anything fails before the commit point, or the process dies there, the backups are
renamed back, now or at the next :func:`recover` -- which every overlay command runs
first -- so no reader is ever left with a half-patched tree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

NEW_SUFFIX = ".overlay-new"
BAK_SUFFIX = ".overlay-bak"


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


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


def recover(journal: Path) -> bool:
    """Roll back an interrupted :func:`replace_all`. Returns True if there was one."""
    if not journal.exists():
        return False
    entries = json.loads(journal.read_text())["targets"]
    targets = [Path(entry["path"]) for entry in entries]
    for entry, target in zip(entries, targets):
        backup = _sibling(target, BAK_SUFFIX)
        if entry["existed"]:
            # Not yet renamed over, the target is still the backup's inode; rename() between
            # two links of one file does nothing, so drop the backup instead.
            if target.exists() and os.path.samefile(backup, target):
                backup.unlink()
            else:
                os.replace(backup, target)
        else:
            target.unlink(missing_ok=True)
        _sibling(target, NEW_SUFFIX).unlink(missing_ok=True)
    journal.unlink()
    for directory in {t.parent for t in targets}:
        _fsync_dir(directory)
    return True


def replace_all(changes: dict[Path, bytes | None], journal: Path) -> None:
    """Write every ``path -> bytes`` (``None`` deletes the path) atomically as a set."""
    recover(journal)
    targets = sorted(changes)
    existed = {target: target.exists() for target in targets}
    try:
        for target in targets:
            backup = _sibling(target, BAK_SUFFIX)
            backup.unlink(missing_ok=True)
            if existed[target]:
                try:
                    os.link(target, backup)
                except OSError:
                    _write_synced(backup, target.read_bytes())
            data = changes[target]
            if data is not None:
                _write_synced(_sibling(target, NEW_SUFFIX), data)
        tmp_journal = _sibling(journal, NEW_SUFFIX)
        _write_synced(tmp_journal, json.dumps(
            {"targets": [{"path": str(t), "existed": existed[t]} for t in targets]}).encode())
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
        if journal.exists():
            recover(journal)
        else:  # failed while staging: nothing was renamed yet
            for target in targets:
                _sibling(target, NEW_SUFFIX).unlink(missing_ok=True)
                _sibling(target, BAK_SUFFIX).unlink(missing_ok=True)
        raise
    journal.unlink()  # commit point
    _fsync_dir(journal.parent)
    for target in targets:
        _sibling(target, BAK_SUFFIX).unlink(missing_ok=True)
