"""A strict unified-diff reader and applier: exact context, no fuzz, no offsets.

The overlay's patches are generated against one exact upstream file (its sha256 is in the
manifest), so anything short of an exact match means the file is not the one the patch was
made for; we refuse rather than guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import DiffError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    old_start: int  # 1-based line number in the old text
    new_start: int
    lines: list[str] = field(default_factory=list)  # each begins with ' ', '-' or '+'


@dataclass
class FileDiff:
    path: str
    hunks: list[Hunk] = field(default_factory=list)


def parse(text: str) -> list[FileDiff]:
    """Split a multi-file unified diff into per-file hunks."""
    files: list[FileDiff] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- "):
            new_name = lines[i + 1]
            if not new_name.startswith("+++ b/"):
                raise DiffError(f"malformed diff header at line {i + 2}: {new_name!r}")
            files.append(FileDiff(path=new_name[len("+++ b/"):].rstrip("\n")))
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise DiffError("hunk before any file header")
            hunk = Hunk(int(match.group(1)), int(match.group(3)))
            old_len = int(match.group(2) or 1)
            new_len = int(match.group(4) or 1)
            i += 1
            while old_len > 0 or new_len > 0:
                body = lines[i]
                hunk.lines.append(body)
                if body[0] in " -":
                    old_len -= 1
                if body[0] in " +":
                    new_len -= 1
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1
    return files


def apply(text: str, diff: FileDiff, reverse: bool = False) -> str:
    """Apply (or revert) one file's hunks to ``text``; raises DiffError on any mismatch."""
    src = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # index into src of the next line not yet copied
    remove, add = ("+", "-") if reverse else ("-", "+")
    for hunk in diff.hunks:
        start = (hunk.new_start if reverse else hunk.old_start) - 1
        expected = [ln[1:] for ln in hunk.lines if ln[0] in (" ", remove)]
        if start == -1 and not expected:  # hunk at the very top of an empty side
            start = 0
        if start < pos or src[start:start + len(expected)] != expected:
            raise DiffError(f"{diff.path}: hunk at line {start + 1} does not match")
        out.extend(src[pos:start])
        out.extend(ln[1:] for ln in hunk.lines if ln[0] in (" ", add))
        pos = start + len(expected)
    out.extend(src[pos:])
    return "".join(out)
