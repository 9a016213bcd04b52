"""The files the recall index reads, and how each one becomes indexed documents.

Only the documented formats are relied on (SPEC 3), never the code that writes them:

* ``memory/history.jsonl`` and ``memory/history.archive.jsonl`` (entries Dream processed,
  moved out of the live file): one entry per line, cited by its ``cursor``.
* ``sessions/**/*.jsonl``: a header line carrying the key, then message lines (cited by
  their 0-based position among message lines) interleaved with ``_type`` records.
* ``SOUL.md``, ``USER.md`` and ``memory/**/*.md``: paragraphs, cited by line number.

Lines are read with the same codecs the stores use (:func:`hippobot.session.records.decode`
for session lines, :func:`hippobot.memory.history.parse_line` for history entries), so a
citation's number is the one the session reader and ``hippobot memory history`` show. A line
those codecs reject is skipped; it never stops the rest of the file from being indexed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hippobot.lazy_regex import lazy_compile
from hippobot.memory.history import parse_line
from hippobot.messages import public_text
from hippobot.safeio import open_fd
from hippobot.session.records import decode
from hippobot.workspace import (
    HISTORY_FILES,
    MEMORY_DIR,
    SESSION_SUFFIX,
    SESSIONS_DIR,
    SOUL_MD,
    USER_MD,
)

from .boilerplate import is_heading
from .query import TOOL_CALL_MARK, Kind

__all__ = [
    "HEAD",
    "MAX_DOC_CHARS",
    "RACY_NS",
    "TAIL",
    "Doc",
    "FileState",
    "Scanner",
    "SessionState",
    "SourceFile",
    "SyncStats",
    "can_append",
    "classify",
    "digest",
    "discover",
    "fallback_session_key",
    "history_docs",
    "markdown_docs",
    "message_text",
    "open_source",
    "parse_new_bytes",
    "parse_timestamp",
    "pread",
    "read_range",
    "session_docs",
    "transcript_speaker",
]

MAX_DOC_CHARS = 32_000  # a huge tool result is indexed (and shown by get) up to here
_TOOL_ARGS_CHARS = 300
_CHUNK_MAX_LINES = 12
_CHUNK_MAX_CHARS = 1_200
_ROOT_MARKDOWN = (SOUL_MD, USER_MD)  # the memory files outside memory/
# "Caroline: ..." / "Dr. Ana Lima: ...": one to three capitalised words and a colon at the
# start of a message, the way transcripts, imported chats and group bridges write who spoke.
_SPEAKER = lazy_compile(r"((?:[^\W\d_][\w'.-]*)(?: [^\W\d_][\w'.-]*){0,2}):\s+\S")
RECALL_TOOLS = frozenset({"memory_search", "memory_get"})
RACY_NS = 2_000_000_000  # an mtime this recent may hide a change made in the same tick
HEAD = 4096  # bytes hashed at the start of a file to detect a rewrite
TAIL = 256  # bytes hashed just before the indexed offset to detect an edit


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file the index covers; ``rel`` is its workspace-relative POSIX path (the key)."""

    path: str  # absolute; a plain string because discovery runs on every sync
    rel: str
    kind: Kind


@dataclass(slots=True)
class Doc:
    """One indexed unit: a history entry, a session message or a Markdown chunk.

    ``num`` is what the citation shows: the history cursor, the message index, or the
    chunk's first line (1-based, ``end_num`` its last line).
    """

    num: int
    text: str
    ts: float | None = None
    session_key: str | None = None
    role: str | None = None
    end_num: int | None = None
    origin: str | None = None


@dataclass(slots=True)
class SessionState:
    """What tail-indexing a session file needs to remember between syncs."""

    session_key: str | None
    next_num: int = 0
    last_ts: float | None = None


class Scanner:
    """Lists every indexable file with its ``stat``; nothing is read.

    Runs before every search and after every turn, so: string paths (pathlib costs more
    than the system calls here), and a directory's listing is reused while the
    directory's mtime is unchanged. A listing younger than ``RACY_NS`` is not reused,
    because a file created in the same clock tick would not move that mtime.
    """

    def __init__(self, workspace: Path) -> None:
        self.root = os.fspath(workspace)
        self._cut = len(self.root) + 1
        self._listings: dict[str, tuple[int, list[tuple[str, bool, SourceFile | None]]]] = {}

    def scan(self) -> list[tuple[SourceFile, os.stat_result]]:
        found: list[tuple[SourceFile, os.stat_result]] = []
        fixed: list[tuple[str, Kind]] = [(rel, "history") for rel in HISTORY_FILES]
        fixed += [(name, "memory") for name in _ROOT_MARKDOWN]
        for rel, kind in fixed:
            path = os.path.join(self.root, rel)
            self._add(found, SourceFile(path, rel, kind))
        self._walk(os.path.join(self.root, MEMORY_DIR), ".md", "memory", found)
        self._walk(os.path.join(self.root, SESSIONS_DIR), SESSION_SUFFIX, "session", found)
        return found

    @staticmethod
    def _add(found: list[tuple[SourceFile, os.stat_result]], sf: SourceFile) -> None:
        try:
            st = os.lstat(sf.path)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode):  # symlinks are not followed out of the workspace
            found.append((sf, st))

    def _walk(
        self, top: str, suffix: str, kind: Kind, found: list[tuple[SourceFile, os.stat_result]]
    ) -> None:
        for path, is_dir, sf in self._entries(top, suffix, kind):
            if is_dir:
                self._walk(path, suffix, kind, found)
            elif sf is not None:
                self._add(found, sf)

    def _entries(
        self, top: str, suffix: str, kind: Kind
    ) -> list[tuple[str, bool, SourceFile | None]]:
        try:
            mtime = os.stat(top).st_mtime_ns
        except OSError:
            self._listings.pop(top, None)
            return []
        cached = self._listings.get(top)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        entries = []
        try:
            with os.scandir(top) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue  # temp files of atomic rewrites, hidden side files
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    sf = None
                    if not is_dir and entry.name.endswith(suffix):
                        rel = entry.path[self._cut :].replace(os.sep, "/")
                        sf = SourceFile(entry.path, rel, kind)
                    entries.append((entry.path, is_dir, sf))
        except OSError:
            return []
        entries.sort(key=lambda e: e[0])
        if time.time_ns() - mtime > RACY_NS:
            self._listings[top] = (mtime, entries)
        return entries


def discover(workspace: Path) -> list[tuple[SourceFile, os.stat_result]]:
    """Every indexable file with its ``stat`` (one-off; :class:`Scanner` caches listings)."""
    return Scanner(workspace).scan()


def classify(workspace: Path, path: Path | str) -> SourceFile | None:
    """The :class:`SourceFile` for ``path`` if the index covers it, else ``None``."""
    root = os.path.abspath(os.fspath(workspace))
    full = os.path.abspath(os.fspath(path))
    if not full.startswith(root + os.sep):
        return None
    rel = full[len(root) + 1 :].replace(os.sep, "/")
    parts = rel.split("/")
    if rel in HISTORY_FILES:
        return SourceFile(full, rel, "history")
    if rel in _ROOT_MARKDOWN or (parts[0] == MEMORY_DIR and rel.endswith(".md")):
        kind: Kind = "memory"
    elif parts[0] == SESSIONS_DIR and rel.endswith(SESSION_SUFFIX):
        kind = "session"
    else:
        return None
    if any(p.startswith(".") for p in parts):
        return None
    return SourceFile(full, rel, kind)


def parse_timestamp(value: Any) -> float | None:
    """Epoch seconds of an ISO-ish timestamp (naive means local time); ``None`` if unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def history_docs(lines: Iterable[bytes]) -> Iterator[Doc]:
    """Entries of ``history.jsonl``, read by the history codec the memory store uses
    (:func:`hippobot.memory.history.parse_line`), so both see the same entries."""
    for line in lines:
        if not line.strip():
            continue
        entry = parse_line(line.decode("utf-8", errors="replace"))
        if entry is None:
            continue
        source = entry.source
        key = entry.session_key or (source.session if source else None)
        origin = f"{source.session}#{source.start}-{source.end}" if source else None
        yield Doc(
            num=entry.cursor,
            text=entry.content[:MAX_DOC_CHARS],
            ts=parse_timestamp(entry.timestamp),
            session_key=key,
            origin=origin,
        )


def message_text(msg: dict[str, Any]) -> str:
    """The public, searchable text of a stored message.

    The runtime-context suffix is stripped exactly (``public_text``); assistant tool calls
    are summarised as ``[tool call] name(args…)`` so a search for a file name or command
    the agent used finds the turn; tool results are indexed like any text. The recall
    tools' own calls and results are left out: they only repeat what a search found, and so
    is the note hippobot stores where the model gave no answer (``_stand_in``).
    """
    if msg.get("role") == "tool" and msg.get("name") in RECALL_TOOLS:
        return ""  # an echo of other documents, not a memory of its own
    if msg.get("_stand_in"):
        return ""  # hippobot's note where the model gave no answer: nobody said it
    parts = []
    text = public_text(msg)
    if text:
        parts.append(text)
    calls = msg.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or fn.get("name") in RECALL_TOOLS:
            continue
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, default=str)
        if len(args) > _TOOL_ARGS_CHARS:
            args = args[:_TOOL_ARGS_CHARS] + "…"
        parts.append(f"{TOOL_CALL_MARK} {fn.get('name', '?')}({args})")
    return "\n".join(parts)[:MAX_DOC_CHARS]


def session_docs(lines: Iterable[bytes], state: SessionState) -> Iterator[Doc]:
    """Messages of a session file, continuing the numbering kept in ``state``.

    Lines are classified by the session codec the store reads with
    (:func:`hippobot.session.records.decode`): exactly the lines the store keeps as
    messages advance ``state.next_num`` (even one with no text), so citations are the
    session's own message positions. A ``session`` (or legacy ``metadata``) record sets
    the key.
    """
    for line in lines:
        if not line.strip():
            continue
        kind, obj = decode(line, first=False)
        if obj is None:
            continue
        if kind != "message":
            if obj.get("_type") in ("session", "metadata") and isinstance(obj.get("key"), str):
                state.session_key = obj["key"]
            continue
        num = state.next_num
        state.next_num += 1
        ts = parse_timestamp(obj.get("timestamp"))
        if ts is not None:
            state.last_ts = ts
        text = message_text(obj)
        if text:
            yield Doc(
                num=num, text=text, ts=state.last_ts, session_key=state.session_key,
                role=obj["role"],
            )


def transcript_speaker(text: str, role: str) -> str | None:
    """Who speaks in a message written as a transcript line (``Name: text``), case-folded;
    ``None`` for any other message. Only people's messages (user, assistant) have one: a
    tool's ``Error: ...`` names no one."""
    if role not in ("user", "assistant"):
        return None
    m = _SPEAKER.match(text)
    if m is None or len(m.group(1)) > 40:
        return None
    words = m.group(1).split()
    if not all(w[0].isupper() for w in words):
        return None
    return m.group(1).casefold()


def markdown_docs(text: str, skip: Callable[[str], bool] | None = None) -> Iterator[Doc]:
    """Paragraph chunks of a Markdown file, with 1-based first/last line numbers.

    A heading starts a new chunk (and stays with the lines under it); a long paragraph is
    split so a citation stays close to the fact. A line ``skip`` rejects (template text,
    see :mod:`~hippobot.recall.boilerplate`) ends a chunk like a blank line, and a chunk of
    headings alone is no document.
    """
    chunk: list[str] = []
    first = 0
    size = 0

    def flush() -> Iterator[Doc]:
        if chunk and not all(is_heading(line) for line in chunk):
            yield Doc(num=first, end_num=first + len(chunk) - 1, text="\n".join(chunk))

    for lineno, line in enumerate(text.splitlines(), start=1):
        blank = not line.strip() or (skip is not None and skip(line))
        if blank or (line.lstrip().startswith("#") and chunk):
            yield from flush()
            chunk, size = [], 0
            if blank:
                continue
        if not chunk:
            first = lineno
        chunk.append(line)
        size += len(line)
        if len(chunk) >= _CHUNK_MAX_LINES or size >= _CHUNK_MAX_CHARS:
            yield from flush()
            chunk, size = [], 0
    yield from flush()


@dataclass(slots=True)
class SyncStats:
    """What one sync (or rebuild) did; counts of files and documents, not timings alone."""

    files_seen: int = 0
    files_unchanged: int = 0
    files_appended: int = 0
    files_reindexed: int = 0
    files_new: int = 0
    files_removed: int = 0
    docs_added: int = 0
    docs_removed: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    rebuilt: bool = False
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for people, e.g. after ``hippobot memory reindex``."""
        head = "rebuilt" if self.rebuilt else "synced"
        return (
            f"{head} {self.files_seen} files ({self.files_new} new, {self.files_appended} "
            f"appended, {self.files_reindexed} re-indexed, {self.files_removed} removed): "
            f"+{self.docs_added} / -{self.docs_removed} entries, "
            f"{self.bytes_read / 1e6:.1f} MB read in {self.seconds:.2f} s"
        )


# --- change detection ---------------------------------------------------------------


@dataclass(slots=True)
class FileState:
    """What the index remembers about a source file between syncs.

    Field order is the ``files`` table's column order (``RecallIndex`` relies on it).
    """

    id: int
    rel: str
    kind: str
    size: int
    mtime_ns: int
    inode: int
    offset: int
    head_len: int
    head_hash: bytes
    tail_hash: bytes
    session_key: str | None
    next_num: int
    last_ts: float | None


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def fallback_session_key(rel: str) -> str:
    """Session key for a file without a header: ``sessions/a/b.jsonl`` → ``a:b``."""
    parts = rel.removeprefix(f"{SESSIONS_DIR}/").removesuffix(SESSION_SUFFIX).split("/")
    return ":".join(parts)


def open_source(sf: SourceFile) -> int:
    """A read-only file descriptor for ``sf``, opened through :mod:`hippobot.safeio`: never
    through a link out of the workspace (the scanner skips links to files, but a folder on
    the way may have been replaced by one since), never a FIFO or device."""
    root = sf.path[: len(sf.path) - len(sf.rel) - 1]  # the workspace the scanner listed
    return open_fd(sf.path, within=root, flags=os.O_RDONLY | getattr(os, "O_BINARY", 0))


def pread(fd: int, n: int, offset: int) -> bytes:
    """``os.pread`` where it exists (POSIX); seek and read elsewhere."""
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, n)


def can_append(fd: int, st: os.stat_result, state: FileState) -> bool:
    """True when the file still starts with exactly the bytes we indexed and only grew."""
    if st.st_ino != state.inode or st.st_size < state.offset or st.st_size == state.size:
        return False
    if digest(pread(fd, state.head_len, 0)) != state.head_hash:
        return False
    tail_len = min(TAIL, state.offset)
    return digest(pread(fd, tail_len, state.offset - tail_len)) == state.tail_hash


def read_range(fd: int, start: int, end: int) -> bytes:
    chunks = []
    pos = start
    while pos < end:
        chunk = pread(fd, min(end - pos, 1 << 24), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def parse_new_bytes(
    kind: str, data: bytes, start: int, session: SessionState
) -> tuple[int, list[Doc]]:
    """Docs in ``data`` (read from byte ``start``) and the offset just after the last one."""
    if kind == "memory":
        return start + len(data), list(markdown_docs(data.decode("utf-8", "replace")))
    cut = data.rfind(b"\n") + 1  # a torn last line waits for the next sync
    lines = data[:cut].split(b"\n")
    docs = history_docs(lines) if kind == "history" else session_docs(lines, session)
    return start + cut, list(docs)
