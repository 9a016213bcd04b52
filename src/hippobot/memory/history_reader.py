"""Cheap reads of ``memory/history.jsonl``: the parsed entries and the last cursor.

:class:`HistoryReader` keeps two caches keyed by the file's (inode, size, mtime):

* the parsed complete lines up to a byte offset; when the file only grew (same inode and
  the last bytes before the offset unchanged) only the appended bytes are parsed;
* the cursor of the last valid entry, found by reading backwards from the end.

Any other change (replaced, shrunk, rewritten in place) means a full read. The reader is
not thread-safe: :class:`~hippobot.memory.store.MemoryStore` calls it under its mutex.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from hippobot.errors import StorageError
from hippobot.memory.history import HistoryEntry, parse_chunk, parse_line
from hippobot.safeio import LinkOutside, open_regular

__all__ = ["HistoryReader", "StoreStats"]

# The store's logger: these warnings are the store's to report, as before the split.
logger = logging.getLogger("hippobot.memory.store")

_TAIL_BLOCK = 4096
_TAIL_BLOCK_MAX = 1 << 20
# Bytes before the parsed offset that must be unchanged for an incremental read to be
# trusted (guards against a file rewritten in place to a larger size).
_ANCHOR = 64


@dataclass(slots=True)
class StoreStats:
    """How much reading the store did; lets tests prove the fast paths are taken."""

    full_reads: int = 0  # whole history.jsonl read (load, max scan, compaction)
    tail_reads: int = 0  # last entry found by reading backwards from the end
    incremental_reads: int = 0  # only the bytes appended since the last read parsed


@dataclass(slots=True)
class _HistoryCache:
    """Parsed complete lines of history.jsonl up to byte ``offset``."""

    ino: int
    size: int
    mtime_ns: int
    offset: int
    anchor: bytes
    entries: list[HistoryEntry]
    tail: HistoryEntry | None  # a valid last line that has no newline yet


class HistoryReader:
    """Reads ``history_path`` (a file inside ``within``, the workspace), counting its reads
    in ``stats`` (shared with the store)."""

    def __init__(self, history_path: Path, stats: StoreStats, *, within: Path) -> None:
        self.history_path = history_path
        self.within = within
        self.stats = stats
        self._tail_key: tuple[int, int, int] | None = None  # (ino, size, mtime_ns)
        self._tail_cursor = 0
        self._cache: _HistoryCache | None = None
        self._warned_torn: tuple[int, int] | None = None

    def forget(self) -> None:
        """Drop both caches: the next read goes to the file."""
        self._cache = None
        self._tail_key = None

    def appended(self, after: os.stat_result, cursor: int) -> None:
        """Record that the store appended the entry ``cursor``, leaving the file at ``after``."""
        self._tail_key = (after.st_ino, after.st_size, after.st_mtime_ns)
        self._tail_cursor = cursor

    def _stat_history(self) -> os.stat_result | None:
        """The file's stat; None when missing; StorageError when it is not a regular file
        (a folder, FIFO or device would fail, hang or never end when read)."""
        try:
            st = self.history_path.stat()
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise StorageError(
                f"{self.history_path.parent} is not a folder; move it aside so hippobot can "
                "recreate it"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise StorageError(
                f"{self.history_path} is not a regular file; move it aside so hippobot can "
                "start a new one"
            )
        return st

    def _open(self) -> BinaryIO:
        """The file, opened as :mod:`hippobot.safeio` allows: a link out of the workspace is
        a StorageError naming it, never read."""
        try:
            return open_regular(self.history_path, within=self.within)
        except LinkOutside as exc:
            raise StorageError(f"{self.history_path}: {exc.strerror}") from None

    def last_cursor(self) -> int:
        """Cursor of the last valid entry, re-reading only the tail when the file changed."""
        st = self._stat_history()
        if st is None or st.st_size == 0:
            return 0
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._tail_key:
            last = self._read_last_entry(st.st_size)
            self._tail_cursor = last.cursor if last else 0
            self._tail_key = key
        return self._tail_cursor

    def _read_last_entry(self, size: int) -> HistoryEntry | None:
        """The last parseable entry, reading backwards in doubling blocks.

        Lines are split on the newline byte, which never occurs inside a multibyte UTF-8
        sequence, so a block boundary cannot corrupt a line we decode. Unparseable
        trailing lines (a torn write) are skipped and the search goes on backwards.
        """
        self.stats.tail_reads += 1
        block = _TAIL_BLOCK
        pos = size
        pending = b""
        with self._open() as fh:
            while pos > 0:
                step = min(block, pos)
                pos -= step
                fh.seek(pos)
                pending = fh.read(step) + pending
                lines = pending.split(b"\n")
                pending = lines.pop(0) if pos > 0 else b""
                for raw in reversed(lines):
                    entry = parse_line(raw.decode("utf-8", errors="replace"))
                    if entry is not None:
                        return entry
                block = min(block * 2, _TAIL_BLOCK_MAX)
        return None

    def entries(self) -> list[HistoryEntry]:
        """Every valid entry in file order, a valid last line without its newline included."""
        st = self._stat_history()
        if st is None:
            self._cache = None
            return []
        cache = self._cache
        if cache is None or not self._extend_cache(cache, st):
            self.stats.full_reads += 1
            try:
                with self._open() as fh:
                    data = fh.read()
            except FileNotFoundError:
                self._cache = None
                return []
            cache = self._cache = _HistoryCache(st.st_ino, 0, 0, 0, b"", [], None)
            self._absorb(cache, st, data)
        return cache.entries + ([cache.tail] if cache.tail else [])

    def _extend_cache(self, cache: _HistoryCache, st: os.stat_result) -> bool:
        """Bring ``cache`` up to date by parsing the appended bytes; False if it cannot."""
        if (cache.ino, cache.size, cache.mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns):
            return True
        if st.st_ino != cache.ino or st.st_size <= cache.size:
            return False  # replaced, shrunk or rewritten in place: parse it all again
        with self._open() as fh:
            start = max(0, cache.offset - len(cache.anchor))
            fh.seek(start)
            if fh.read(cache.offset - start) != cache.anchor:
                return False
            data = fh.read(st.st_size - cache.offset)
        self.stats.incremental_reads += 1
        self._absorb(cache, st, data)
        return True

    def _absorb(self, cache: _HistoryCache, st: os.stat_result, data: bytes) -> None:
        """Add ``data`` (the file's bytes from ``cache.offset`` on) to ``cache``.

        Complete lines are parsed once and kept; a final line without its newline is
        parsed on every call until it is finished. Invalid lines get one warning.
        """
        chunk = parse_chunk(data)
        if chunk.invalid:
            logger.warning(
                "%s: skipped %d invalid line(s) after byte %d",
                self.history_path,
                chunk.invalid,
                cache.offset,
            )
        cache.entries.extend(chunk.entries)
        cache.offset += chunk.consumed
        cache.anchor = (cache.anchor + data[: chunk.consumed])[-_ANCHOR:]
        cache.size, cache.mtime_ns, cache.tail = st.st_size, st.st_mtime_ns, None
        if chunk.tail.strip():
            cache.tail = parse_line(chunk.tail.decode("utf-8", errors="replace"))
            marker = (cache.offset, len(chunk.tail))
            if cache.tail is None and self._warned_torn != marker:
                self._warned_torn = marker
                logger.warning(
                    "%s ends in an incomplete line (%d bytes, likely a crash mid-write); "
                    "skipped it",
                    self.history_path,
                    len(chunk.tail),
                )
