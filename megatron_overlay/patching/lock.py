"""One inter-process lock per site directory, so that every rank of a job may run set-up.

Clusters run the set-up step on every rank at once, often on one shared environment.
Writers (``patch``, ``unpatch``) hold the lock exclusively; readers (``status``,
``verify``) hold it shared, so they wait for a writer and then see a finished state.

The lock is ``flock`` on ``<site>/.megatron-overlay.lock``. The file lives beside the
distributions, never inside megatron-core's dist-info (pip would leave an unrecorded file
there behind on uninstall or reinstall). It is created by the first writer and never
deleted (deleting a lock file races with processes waiting on it); a reader never creates
it: where it does not exist, no overlay command has ever written here, and the reader
reads without a lock, then reads again under it if a first writer created it meanwhile
(``read_consistently``: the first read may have seen that writer's work half done). The
kernel releases the lock when its holder dies, so a killed run never leaves it held. On
Linux, ``flock`` on NFS is carried by NFS byte-range locks, so ranks on several hosts
sharing one environment serialize too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Callable, TypeVar

from .errors import PatchError

LOCK_NAME = ".megatron-overlay.lock"
T = TypeVar("T")


def lock_path(directory: Path) -> Path:
    return Path(directory) / LOCK_NAME


@contextlib.contextmanager
def exclusive(directory: Path):
    """Hold the directory's lock exclusively (creating its file); waits for other holders."""
    path = lock_path(directory)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise PatchError(f"cannot create the lock file {path} ({err.strerror}): run with "
                         f"permission to modify this environment") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def shared(directory: Path):
    """Hold the directory's lock shared, if it exists; never creates anything. Yields
    whether it holds the lock (False: no lock file, or not readable)."""
    try:
        fd = os.open(lock_path(directory), os.O_RDONLY)
    except OSError:  # never written by the overlay, or not readable: nothing to wait for
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield True
    finally:
        os.close(fd)


def read_consistently(directory: Path, read: Callable[[], T]) -> T:
    """``read()`` under the shared lock. Where there is no lock file, the read runs
    unlocked; if the lock file exists once it returns, the first writer started during
    it (a writer creates the file before it changes anything) and it runs again under
    the lock, after that writer. Never creates anything."""
    with shared(directory) as held:
        result = read()
    if held or not lock_path(directory).exists():
        return result
    with shared(directory):
        return read()
