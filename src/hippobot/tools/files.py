"""File tools: read_file, write_file, edit_file, list_dir.

Every path goes through a :class:`~hippobot.tools.paths.PathPolicy` first. Writes are
atomic (temp file in the same directory, fsync, ``os.replace``): a reader, or a crash, sees
the old file or the new one, never half of either, and a failed write leaves the old file
untouched and no temp file behind. With ``redact`` given, what is written passes through it
first (hippobot redacts its configured keys from the files that shape the prompt, so a key
never reaches memory, its history or a later prompt). The tool functions are synchronous;
the registry runs them in a worker thread.

Given a ``lock`` (the workspace's per-file lock, see :mod:`hippobot.workspace`), every
read-modify-write holds the file's lock, so concurrent sessions, Dream and a restore never
lose each other's edits.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from hippobot.atomic import atomic_write_bytes
from hippobot.errors import StorageError, ToolError
from hippobot.tools.base import Tool
from hippobot.tools.paths import PathPolicy

__all__ = ["MAX_LIST_ENTRIES", "apply_edit", "file_tools"]

MAX_LIST_ENTRIES = 500
_BINARY_SNIFF_BYTES = 8192
_SIMILAR_LINE_CUTOFF = 0.6
_SIMILAR_LINE_MAX_LINES = 20_000


WriteFilter = Callable[[Path, str], str]  # (path, text) -> the text to write
WriteCheck = Callable[[Path, str], str | None]  # (path, text the model wrote) -> why not, or None
FileLock = Callable[[Path], AbstractContextManager[object]]
_REDACTED_NOTE = " (a secret in it was replaced with [REDACTED])"


def _no_lock(path: Path) -> AbstractContextManager[object]:
    return nullcontext()


def file_tools(
    policy: PathPolicy,
    *,
    max_read_chars: int = 50_000,
    lock: FileLock | None = None,
    redact: WriteFilter | None = None,
    keeps_lines: Callable[[Path], Callable[[str], bool] | None] | None = None,
    refuse: WriteCheck | None = None,
) -> list[Tool]:
    """The four file tools, confined by ``policy``; writes hold ``lock(path)`` and what
    they write passes through ``redact(path, text)``. ``write_file`` may not drop a fact
    line of a file ``keeps_lines(path)`` guards (the memory files; it returns which lines
    are facts: not the template's text, headings or empty fields): small models "remember" a
    fact by overwriting MEMORY.md with that one line, and a wrong edit of one line is
    undone far more easily than a file that lost the rest. ``refuse(path, text)`` judges
    what the model wrote (``content``, ``new_text``): a reason refuses the write, and
    nothing is written."""
    file_lock = lock or _no_lock

    def check(target: Path, text: str) -> None:
        reason = refuse(target, text) if refuse is not None else None
        if reason is not None:
            raise ToolError(f"{reason}; nothing was written")

    def read_file(path: str, offset: int = 1, limit: int | None = None) -> str:
        """Read a UTF-8 text file. Long output is cut with a note saying how to read on.

        Args:
            path: File path, relative to the workspace or absolute.
            offset: Line number to start reading at (1 = first line).
            limit: Maximum number of lines to return (default: as many as fit).
        """
        return _read(policy, path, offset, limit, max_read_chars)

    def write_file(path: str, content: str) -> str:
        """Create or overwrite a file with the given content. Parent directories are created.

        Args:
            path: File path, relative to the workspace or absolute.
            content: The complete new content of the file.
        """
        target = policy.resolve(path, for_write=True)
        if target.is_dir():
            raise ToolError(f"{path} is a directory; give a file path")
        check(target, content)
        clean = redact(target, content) if redact is not None else content
        data = clean.encode("utf-8")
        with _holding(file_lock, target, path):
            existed = target.exists()
            is_fact = keeps_lines(target) if existed and keeps_lines is not None else None
            if is_fact is not None:
                _refuse_dropped_lines(target, clean, is_fact, display=path)
            _atomic_write(target, data, display=path)
        verb = "Overwrote" if existed else "Created"
        note = _REDACTED_NOTE if clean != content else ""
        return f"{verb} {policy.display(target)} ({len(data)} bytes written){note}"

    def edit_file(path: str, old_text: str, new_text: str, replace_all: bool = False) -> str:
        """Replace an exact piece of text in a file. old_text must match exactly once unless replace_all is true.

        Args:
            path: File path, relative to the workspace or absolute.
            old_text: The exact text to replace, including whitespace and indentation.
            new_text: The text to put in its place.
            replace_all: Replace every occurrence instead of requiring exactly one.
        """
        target = policy.resolve(path, for_write=True)
        check(target, new_text)
        with _holding(file_lock, target, path):
            return _edit(policy, path, old_text, new_text, replace_all, redact)

    def list_dir(path: str = ".") -> str:
        """List a directory. Subdirectories end with '/', files show their size, symlinks their target.

        Args:
            path: Directory path, relative to the workspace or absolute.
        """
        return _list(policy, path)

    return [Tool.from_function(f) for f in (read_file, write_file, edit_file, list_dir)]


def _refuse_dropped_lines(target: Path, new: str, is_fact: Callable[[str], bool], *, display: str) -> None:
    try:
        old = target.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return  # unreadable: the write itself says what is wrong
    kept = {line.strip() for line in new.splitlines()}
    dropped = [line.strip() for line in old.splitlines() if is_fact(line) and line.strip() not in kept]
    if dropped:
        raise ToolError(
            f"write_file would remove {len(dropped)} line(s) of {display} (first: {dropped[0][:80]!r}); "
            f"nothing was written. To add a fact, use edit_file to insert it; to change a line, "
            f"edit_file that line"
        )


# --- edit ---------------------------------------------------------------------------


def apply_edit(text: str, old: str, new: str, replace_all: bool = False) -> str:
    """``text`` with ``old`` replaced by ``new``; :class:`ToolError` if that is not exact.

    ``old`` must occur exactly once (overlapping occurrences count as ambiguous) unless
    ``replace_all``, in which case every non-overlapping occurrence is replaced.
    """
    if not old:
        raise ToolError("old_text is empty; to create or overwrite a whole file use write_file")
    if old == new:
        raise ToolError("old_text and new_text are identical; the file would not change")
    first = text.find(old)
    if first < 0:
        raise ToolError(_not_found_message(text, old))
    if replace_all:
        return text.replace(old, new)
    if text.find(old, first + 1) >= 0:
        count = _count_overlapping(text, old)
        raise ToolError(
            f"old_text matches {count} places; include more surrounding lines so it matches "
            f"exactly once, or set replace_all to true to replace all of them"
        )
    return text[:first] + new + text[first + len(old) :]


def _count_overlapping(text: str, old: str) -> int:
    count, at = 0, text.find(old)
    while at >= 0:
        count += 1
        at = text.find(old, at + 1)
    return count


def _not_found_message(text: str, old: str) -> str:
    msg = "old_text was not found in the file"
    if " ".join(old.split()) and " ".join(old.split()) in " ".join(text.split()):
        msg += (
            "; it does match when whitespace is ignored, so check indentation, tabs vs spaces, "
            "trailing spaces and line breaks"
        )
    closest = _closest_line(text, old)
    if closest is not None:
        number, line = closest
        msg += f". The most similar line in the file is line {number}: {line.strip()[:200]!r}"
    return msg + ". Read the file again and copy the text exactly."


def _closest_line(text: str, old: str) -> tuple[int, str] | None:
    probe = next((ln.strip() for ln in old.splitlines() if ln.strip()), "")
    lines = text.splitlines()
    if not probe or not lines or len(lines) > _SIMILAR_LINE_MAX_LINES:
        return None
    stripped = [ln.strip() for ln in lines]
    best = difflib.get_close_matches(probe, stripped, n=1, cutoff=_SIMILAR_LINE_CUTOFF)
    if not best:
        return None
    index = stripped.index(best[0])
    return index + 1, lines[index]


def _edit(
    policy: PathPolicy, path: str, old: str, new: str, replace_all: bool, redact: WriteFilter | None
) -> str:
    target = policy.resolve(path, for_write=True)
    raw = _read_bytes(policy, path, target)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(
            f"{path} is not valid UTF-8 text; edit_file cannot change it safely"
        ) from None
    if "\r\n" in text and "\r\n" not in old and "\n" in old and old not in text:
        # The model usually writes \n; match a CRLF file's own line endings.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
    count = text.count(old) if replace_all else 1
    updated = apply_edit(text, old, new, replace_all)
    clean = redact(target, updated) if redact is not None else updated
    _atomic_write(target, clean.encode("utf-8"), display=path)
    noun = "replacement" if count == 1 else "replacements"
    note = _REDACTED_NOTE if clean != updated else ""
    return f"Edited {policy.display(target)}: {count} {noun}{note}"


@contextlib.contextmanager
def _holding(lock: FileLock, target: Path, display: str) -> Iterator[None]:
    try:
        held = lock(target)
        held.__enter__()
    except TimeoutError:
        raise ToolError(f"{display} is being changed by something else; try again") from None
    except OSError as exc:
        raise ToolError(f"cannot lock {display}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        held.__exit__(None, None, None)


# --- read ---------------------------------------------------------------------------


def _read_bytes_head(policy: PathPolicy, path: str, target: Path) -> None:
    """Refuse directories, missing files and binary content before a streamed read."""
    _read_bytes(policy, path, target, size=_BINARY_SNIFF_BYTES)


def _read_bytes(policy: PathPolicy, path: str, target: Path, size: int = -1) -> bytes:
    """The file's bytes (the first ``size`` if given), refusing directories, missing files
    and binary content."""
    if target.is_dir():
        raise ToolError(f"{path} is a directory; use list_dir to see its entries")
    try:
        with open(target, "rb") as fh:
            raw = fh.read(size)
    except FileNotFoundError:
        raise ToolError(_missing_message(policy, path, target)) from None
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\x00" in raw[:_BINARY_SNIFF_BYTES]:
        raise ToolError(f"{path} looks like a binary file (it contains NUL bytes); not shown")
    return raw


def _missing_message(policy: PathPolicy, path: str, target: Path) -> str:
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return f"{path} does not exist; use list_dir on {policy.display(parent)!r} to see what is there"


def _read(policy: PathPolicy, path: str, offset: int, limit: int | None, cap: int) -> str:
    if offset < 1:
        raise ToolError("offset must be 1 or more (the first line is 1)")
    if limit is not None and limit < 1:
        raise ToolError("limit must be 1 or more")
    target = policy.resolve(path)
    _read_bytes_head(policy, path, target)
    last_wanted = None if limit is None else offset - 1 + limit
    out: list[str] = []
    used = total = 0
    cut = False  # the cap stopped us before the requested range ended
    with open(target, "rb") as fh:  # streamed: only the shown lines are held in memory
        for raw in fh:
            total += 1
            if total < offset or cut or (last_wanted is not None and total > last_wanted):
                continue
            line = raw.decode("utf-8", errors="replace")
            if used + len(line) > cap:
                cut = True
                if not out:  # one line longer than the cap: show its start
                    out.append(line[:cap])
                continue
            out.append(line)
            used += len(line)
    if total == 0:
        return f"({path} is empty)"
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {path}, which has {total} lines")
    end = min(total, last_wanted or total)
    body = "".join(out).rstrip("\n")
    if cut:
        shown_to = offset - 1 + len(out)
        if used == 0:
            note = f"line {offset} is longer than {cap} characters; only its start is shown"
        else:
            note = f"output truncated at {cap} characters: showing lines {offset}-{shown_to} of {total}"
        return f"{body}\n[... {note}. Read on with offset={shown_to + 1}, or pass a smaller limit.]"
    if offset > 1 or end < total:
        more = f" Read on with offset={end + 1}." if end < total else ""
        return f"{body}\n[lines {offset}-{end} of {total}.{more}]"
    return "".join(out)


# --- write --------------------------------------------------------------------------


def _atomic_write(target: Path, data: bytes, *, display: str) -> None:
    """Replace ``target`` with ``data`` atomically (:func:`hippobot.atomic.atomic_write_bytes`,
    which keeps an existing file's mode); a failure names the file as the model wrote it."""
    try:
        atomic_write_bytes(target, data)
    except StorageError as exc:
        reason = getattr(exc.__cause__, "strerror", None) or exc.__cause__ or exc
        raise ToolError(
            f"cannot write {display}: {reason}; the existing file was left unchanged"
        ) from None


# --- list ---------------------------------------------------------------------------


def _list(policy: PathPolicy, path: str) -> str:
    target = policy.resolve(path)
    if not target.exists():
        raise ToolError(_missing_message(policy, path, target))
    if not target.is_dir():
        raise ToolError(f"{path} is a file, not a directory; use read_file to read it")
    try:
        with os.scandir(target) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise ToolError(f"cannot list {path}: {exc.strerror or exc}") from None
    if not entries:
        return f"{policy.display(target)}/ is empty"
    lines = [_entry_line(e) for e in entries[:MAX_LIST_ENTRIES]]
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(
            f"[... {len(entries) - MAX_LIST_ENTRIES} more entries not shown; "
            "list a subdirectory or use exec with find/ls to narrow down]"
        )
    return "\n".join(lines)


def _entry_line(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            target = os.readlink(entry.path)
            suffix = "/" if entry.is_dir() else ""
            return f"{entry.name}{suffix} -> {target} (symlink)"
        if entry.is_dir():
            return f"{entry.name}/"
        if entry.is_file():
            return f"{entry.name}  ({_size(entry.stat().st_size)})"
    except OSError:
        return f"{entry.name}  (unreadable)"
    return f"{entry.name}  (special file)"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB"):
        n_f = n / 1024
        if n_f < 1024 or unit == "GB":
            return f"{n_f:.1f} {unit}"
        n = int(n_f)
    return f"{n} B"
