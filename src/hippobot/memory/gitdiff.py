"""Diffs between two snapshots of memory files ({path: bytes}): stats and unified text.

Invariants:

* Only line content counts: a file whose lines are equal once CRLF is read as LF is
  not reported as changed (a created or deleted file always is).
* A file that is not UTF-8 is reported as ``binary`` with no diff text.
* Files are listed sorted by path; ``summarize`` cuts the diff text at ``cap``
  characters and then ends it with ``TRUNCATED``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = [
    "DIFF_CAP",
    "TRUNCATED",
    "DiffSummary",
    "FileStat",
    "Snapshot",
    "dream_message",
    "summarize",
]

DIFF_CAP = 6_000
TRUNCATED = "...[diff truncated]"

Snapshot = dict[str, bytes]


@dataclass(frozen=True)
class FileStat:
    """Lines added/removed in one file; ``binary`` when it is not UTF-8 text."""

    path: str
    added: int
    removed: int
    binary: bool = False

    def line(self) -> str:
        if self.binary:
            return f"{self.path}: binary or non-UTF-8 file changed"
        return f"{self.path}: +{self.added} -{self.removed}"


@dataclass(frozen=True)
class DiffSummary:
    """Changes between two states; falsy when nothing changed (CRLF-only edits ignored)."""

    files: tuple[FileStat, ...]
    diff: str
    truncated: bool = False

    def __bool__(self) -> bool:
        return bool(self.files)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    @property
    def insertions(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.removed for f in self.files)

    def stats(self) -> str:
        """Per-file ``path: +A -R`` lines and a totals line ("" when unchanged)."""
        if not self.files:
            return ""
        n = len(self.files)
        totals = (
            f"{n} file{'s' if n != 1 else ''} changed, {self.insertions} insertion(s)(+), "
            f"{self.deletions} deletion(s)(-)"
        )
        return "\n".join([*(f.line() for f in self.files), totals])

    @property
    def text(self) -> str:
        """Stats followed by the fenced unified diff ("" when unchanged)."""
        if not self.files:
            return ""
        return f"{self.stats()}\n\n```diff\n{self.diff}\n```" if self.diff else self.stats()

    def __str__(self) -> str:
        return self.text


def dream_message(when: str, summary: DiffSummary) -> str:
    """``dream: <when>, <n> change(s)`` plus the summary; n counts changed files."""
    head = f"dream: {when}, {len(summary.files)} change(s)"
    return f"{head}\n\n{summary.text}" if summary else head


def _text_lines(data: bytes | None) -> list[str]:
    text = (data or b"").decode("utf-8").replace("\r\n", "\n")
    return text.split("\n") if text else []


def _file_diff(path: str, old: bytes | None, new: bytes | None) -> tuple[FileStat, str] | None:
    """Stat and unified diff of one file, or None when only line endings changed."""
    try:
        a, b = _text_lines(old), _text_lines(new)
    except UnicodeDecodeError:
        return FileStat(path, 0, 0, binary=True), ""
    if a and not a[-1]:
        a.pop()  # a trailing newline is not a line of its own
    if b and not b[-1]:
        b.pop()
    if a == b and (old is None) == (new is None):
        return None
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    added = sum(j2 - j1 for tag, _, _, j1, j2 in ops if tag != "equal")
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag != "equal")
    src = "/dev/null" if old is None else f"a/{path}"
    dst = "/dev/null" if new is None else f"b/{path}"
    body = "\n".join(difflib.unified_diff(a, b, src, dst, lineterm=""))
    return FileStat(path, added, removed), body or f"--- {src}\n+++ {dst}"


def summarize(old: Snapshot, new: Snapshot, cap: int | None = DIFF_CAP) -> DiffSummary:
    """Compare two snapshots ({path: bytes}); the diff text is cut at ``cap`` chars."""
    stats: list[FileStat] = []
    bodies: list[str] = []
    for path in sorted(old.keys() | new.keys()):
        if old.get(path) == new.get(path):
            continue
        result = _file_diff(path, old.get(path), new.get(path))
        if result is not None:
            stats.append(result[0])
            if result[1]:
                bodies.append(result[1])
    diff = "\n".join(bodies)
    truncated = cap is not None and len(diff) > cap
    if truncated:
        diff = diff[:cap].rstrip("\n") + "\n" + TRUNCATED
    return DiffSummary(tuple(stats), diff, truncated)
