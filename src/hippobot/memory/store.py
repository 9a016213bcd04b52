"""The memory files of a workspace: durable Markdown, the history archive and its cursors.

Layout (SPEC 3)::

    SOUL.md  USER.md
    memory/MEMORY.md
    memory/history.jsonl      one HistoryEntry per line, cursors strictly increasing
    memory/.cursor            last cursor allocated (decimal, no newline needed)
    memory/.dream_cursor      last cursor a completed Dream processed (decimal)
    memory/HISTORY.md         nanobot's legacy archive, migrated once, kept as .bak

Invariants this module keeps:

* Every rewrite is atomic (:func:`atomic_write_text`): a reader sees the old file or the
  new one, never half of either, and a failed write leaves the old file in place.
* ``history.jsonl`` is only appended to, except by :meth:`MemoryStore.compact_history`
  and the one-time legacy migration, which rewrite it atomically.
* Appending allocates ``max(.cursor, last cursor in the file, .dream_cursor) + 1`` under
  a cross-process lock (``.hippobot/locks/history.lock``), so two processes never hand
  out the same cursor, and a new entry is never hidden behind the Dream cursor.
* Text is cleaned before it is written: reasoning blocks removed, secrets redacted,
  size capped. The archive never holds a key that the store was able to recognise.
* Reading is forgiving: invalid lines (a crash's torn last line, a hand edit) are
  skipped with one warning; a garbage ``.cursor`` is rebuilt from the file, a garbage
  ``.dream_cursor`` becomes 0 (everything pending again; nothing is lost).

Locking order is always the in-process mutex first, then the file lock.

The atomic writes are in :mod:`hippobot.atomic` (re-exported here); the caches that make
reading ``history.jsonl`` cheap are in :mod:`hippobot.memory.history_reader`; the file names
come from :class:`hippobot.workspace.Workspace`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from hippobot.atomic import atomic_write_bytes, atomic_write_text
from hippobot.errors import StorageError
from hippobot.lazy_regex import lazy_compile
from hippobot.locks import LockTimeout, locked
from hippobot.memory.history import (
    MAX_CURSOR,
    HistoryEntry,
    HistorySource,
    format_timestamp,
    parse_line,
    split_legacy_history,
    strip_think,
)
from hippobot.memory.history_reader import HistoryReader, StoreStats
from hippobot.redact import Redactor
from hippobot.safeio import LinkOutside, NotRegularFile, open_fd, open_regular, read_regular
from hippobot.workspace import Workspace

__all__ = [
    "DEFAULT_KEEP_ENTRIES",
    "HISTORY_ENTRY_HARD_CAP",
    "TRUNCATION_SUFFIX",
    "MemoryStore",
    "StoreStats",
    "atomic_write_bytes",
    "atomic_write_text",
]

logger = logging.getLogger(__name__)

HISTORY_ENTRY_HARD_CAP = 64_000
TRUNCATION_SUFFIX = "\n... (truncated)"
DEFAULT_KEEP_ENTRIES = 1000
LOCK_TIMEOUT_S = 60.0

_DECIMAL = lazy_compile(r"\d{1,19}")  # longer (or >= 2**63, see MAX_CURSOR) is garbage
_REDACT_MARGIN = 4096


def _read_text(path: Path, within: Path) -> str:
    try:
        return read_regular(path, within=within).decode("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ""
    except NotRegularFile:
        logger.warning("%s is a FIFO or device, not a file; treating it as empty", path)
        return ""
    except LinkOutside as exc:
        logger.warning("%s is %s; treating it as empty", path, exc.strerror)
        return ""


@contextmanager
def _unsafe_link_is_storage_error() -> Iterator[None]:
    """A history or archive file that is a link out of the workspace: one clear line."""
    try:
        yield
    except LinkOutside as exc:
        raise StorageError(f"{exc.filename}: {exc.strerror}") from None


# --- the store --------------------------------------------------------------------------


class MemoryStore:
    """File access for a workspace's memory; safe across threads and processes.

    ``redactor`` (the agent's: the configured API keys and the recognised token shapes) is
    applied to every history entry before it is written. ``clock`` gives the local time used
    for new entries' timestamps.

    ``read_only`` never writes: no legacy migration (:meth:`legacy_entries` shows what it
    would bring), a garbled cursor is read as its repaired value without rewriting it, and
    every writer of the history raises :class:`StorageError`.
    """

    def __init__(
        self,
        workspace: Path,
        *,
        redactor: Redactor | None = None,
        clock: Callable[[], datetime] = datetime.now,
        migrate: bool = True,
        read_only: bool = False,
    ) -> None:
        self.workspace = Path(workspace)
        self.read_only = read_only
        paths = Workspace(self.workspace)
        self.memory_dir = paths.memory_dir
        self.memory_path = paths.memory_md
        self.history_path = paths.history
        self.cursor_path = paths.cursor
        self.dream_cursor_path = paths.dream_cursor
        self.archive_path = paths.history_archive
        self.legacy_history_path = paths.legacy_history
        self._paths = paths
        self.soul_path = paths.soul
        self.user_path = paths.user
        self.lock_path = paths.history_lock
        self.stats = StoreStats()
        self._redact = redactor or Redactor()  # without keys: the token shapes still go
        self._clock = clock
        self._mutex = threading.RLock()
        # Caches of history.jsonl (parsed entries, last cursor); used under _mutex.
        self._history = HistoryReader(self.history_path, self.stats, within=self.workspace)
        self._warned_truncation = False
        if migrate and not read_only:
            try:
                self.migrate_legacy()
            except StorageError as exc:
                # Reads still work; the migration is tried again by the next store.
                logger.warning("legacy history migration postponed: %s", exc)

    # --- durable Markdown files ----------------------------------------------------------

    def read_memory(self) -> str:
        return _read_text(self.memory_path, self.workspace)

    def read_soul(self) -> str:
        return _read_text(self.soul_path, self.workspace)

    def read_user(self) -> str:
        return _read_text(self.user_path, self.workspace)

    def write_memory(self, text: str) -> None:
        atomic_write_text(self.memory_path, text)

    def write_soul(self, text: str) -> None:
        atomic_write_text(self.soul_path, text)

    def write_user(self, text: str) -> None:
        atomic_write_text(self.user_path, text)

    # --- locking --------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the in-process mutex and the cross-process history lock (blocking: the
        async callers reach this through ``asyncio.to_thread``)."""
        if self.read_only:
            raise StorageError(f"{self.history_path} was opened read-only; nothing was written")
        with self._mutex:
            try:
                lock = locked(self.lock_path, timeout=LOCK_TIMEOUT_S)
                lock.__enter__()
            except LockTimeout as exc:
                raise StorageError(
                    f"another process has held {self.lock_path} for over {LOCK_TIMEOUT_S:.0f}s"
                ) from exc
            except OSError as exc:
                raise StorageError(f"could not lock {self.lock_path}: {exc}") from exc
            try:
                yield
            finally:
                lock.__exit__(None, None, None)

    # --- cursors ----------------------------------------------------------------------------

    def _read_counter(self, path: Path) -> int | str | None:
        """The decimal in ``path``; ``None`` when missing; the raw text when it is garbage."""
        try:
            raw = read_regular(path, 64, within=self.workspace).decode("utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            return None
        except (NotRegularFile, LinkOutside):
            return "(not a regular file)"  # garbage: repaired like any other
        text = raw.strip()
        if _DECIMAL.fullmatch(text) and int(text) <= MAX_CURSOR:
            return int(text)
        return raw

    def _counter(self) -> int | None:
        """``.cursor``'s value; garbage is repaired from the file's largest cursor."""
        value = self._read_counter(self.cursor_path)
        if value is None or isinstance(value, int):
            return value
        if self.read_only:
            return self._max_cursor_in_file()
        with self._locked():
            value = self._read_counter(self.cursor_path)  # another process may have fixed it
            if value is None or isinstance(value, int):
                return value
            repaired = self._max_cursor_in_file()
            atomic_write_text(self.cursor_path, str(repaired))
        logger.warning(
            "%s held %r, not a cursor; rebuilt it as %d from %s",
            self.cursor_path,
            value[:40],
            repaired,
            self.history_path.name,
        )
        return repaired

    def last_cursor(self) -> int:
        """The last cursor allocated (0 when there is no history)."""
        with self._mutex:
            return max(self._counter() or 0, self._history.last_cursor())

    def dream_cursor(self) -> int:
        """The last cursor a completed Dream processed; 0 when missing.

        Garbage is rewritten as 0 with a warning: every entry counts as pending again,
        which can repeat work but never skips an entry.
        """
        value = self._read_counter(self.dream_cursor_path)
        if value is None or isinstance(value, int):
            return value or 0
        if self.read_only:
            return 0
        with self._locked():
            value = self._read_counter(self.dream_cursor_path)
            if value is None or isinstance(value, int):
                return value or 0
            atomic_write_text(self.dream_cursor_path, "0")
        logger.warning(
            "%s held %r, not a cursor; reset it to 0, so Dream will re-read every "
            "history entry (nothing is lost)",
            self.dream_cursor_path,
            value[:40],
        )
        return 0

    def set_dream_cursor(self, cursor: int) -> None:
        """Record that a completed Dream processed every entry up to ``cursor``."""
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            raise ValueError(f"dream cursor must be a non-negative int, got {cursor!r}")
        with self._locked():
            atomic_write_text(self.dream_cursor_path, str(cursor))

    def pending_count(self) -> int:
        """How many history entries a Dream has not processed yet."""
        return len(self.read_history(after=self.dream_cursor()))

    def _max_cursor_in_file(self) -> int:
        with self._mutex:
            return max((e.cursor for e in self._history.entries()), default=0)

    # --- appending --------------------------------------------------------------------------

    def _prepare(self, content: str, max_chars: int) -> str:
        # A lone surrogate (a model's JSON may carry half an emoji) cannot be stored as UTF-8.
        content = content.encode("utf-8", "replace").decode("utf-8")
        text = strip_think(content).rstrip()
        original = len(text)
        # Bound the redaction work on huge input; the margin keeps a secret that straddles
        # the final cut whole, so it is recognised and removed rather than half-kept.
        text = text[: max_chars + _REDACT_MARGIN]
        text = self._redact(text)
        if len(text) > max_chars:
            if not self._warned_truncation:
                logger.warning(
                    "history entry of %d chars cut to %d (further cuts not reported)",
                    original,
                    max_chars,
                )
                self._warned_truncation = True
            keep = max(0, max_chars - len(TRUNCATION_SUFFIX))
            text = text[:keep].rstrip() + TRUNCATION_SUFFIX
        return text

    def append_history(
        self,
        content: str,
        *,
        session_key: str | None,
        source: HistorySource | None = None,
        max_chars: int = HISTORY_ENTRY_HARD_CAP,
        timestamp: str | None = None,
    ) -> HistoryEntry:
        """Append one entry and return it with its newly allocated cursor.

        ``content`` is cleaned (reasoning removed, trailing space stripped, secrets
        redacted, capped at ``max_chars`` with ``"\\n... (truncated)"``). The line is
        written with a single ``write`` on an ``O_APPEND`` descriptor and fsynced; then
        ``.cursor`` is replaced atomically. If a crash tore the previous last line, the
        new line starts on a fresh line so it stays parseable.
        """
        text = self._prepare(content, max_chars)
        stamp = timestamp or format_timestamp(self._clock())
        with self._locked():
            cursor = max(self._counter() or 0, self._history.last_cursor(), self.dream_cursor()) + 1
            entry = HistoryEntry(cursor, stamp, text, session_key=session_key, source=source)
            self._append_line(entry.to_json(), cursor)
            atomic_write_text(self.cursor_path, str(cursor))
        return entry

    def _append_line(self, line: str, cursor: int) -> None:
        data = line.encode("utf-8") + b"\n"
        try:
            self.memory_dir.mkdir(parents=True, exist_ok=True)
            # never appended through a link out of the workspace (another user's history)
            fd = open_fd(self.history_path, within=self.workspace,
                         flags=os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            raise StorageError(f"could not open {self.history_path}: {exc}") from exc
        size_before: int | None = None
        try:
            st = os.fstat(fd)
            size_before = st.st_size
            if st.st_size > 0 and not self._ends_with_newline(st.st_size):
                data = b"\n" + data
            view = memoryview(data)
            # One write in practice; the loop only matters for a short write, and the
            # lock keeps any continuation contiguous.
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            after = os.fstat(fd)
        except OSError as exc:
            if size_before is not None:  # disk full mid-line: leave no partial line behind
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size_before)
            raise StorageError(
                f"could not append to {self.history_path}: {exc}; earlier entries are intact"
            ) from exc
        finally:
            os.close(fd)
        self._history.appended(after, cursor)

    def _ends_with_newline(self, size: int) -> bool:
        with open_regular(self.history_path, within=self.workspace) as fh:
            fh.seek(size - 1)
            return fh.read(1) == b"\n"

    # --- reading ----------------------------------------------------------------------------

    def read_history(
        self,
        *,
        after: int = 0,
        session_key: str | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]:
        """Valid entries with ``cursor > after``, in file order.

        With ``session_key``, only that session's entries (keyless legacy entries are
        excluded). With ``limit``, the newest ``limit`` of them. Cheap to call every
        turn: parsed entries are cached and only appended bytes are parsed again.
        """
        with self._mutex:
            entries = self._history.entries()
        selected = [
            e
            for e in entries
            if e.cursor > after and (session_key is None or e.session_key == session_key)
        ]
        if limit is not None:
            selected = selected[-limit:] if limit > 0 else []
        return selected

    def get_entry(self, cursor: int) -> HistoryEntry | None:
        """The entry with ``cursor`` (a citation target), from the live file or the archive."""
        with self._mutex:
            found = next((e for e in self._history.entries() if e.cursor == cursor), None)
        if found is None:
            found = next((e for e in self.read_archive() if e.cursor == cursor), None)
        return found

    def read_archive(self) -> list[HistoryEntry]:
        """Entries Dream processed and :meth:`archive_processed` moved out of history.jsonl."""
        try:
            with _unsafe_link_is_storage_error():
                data = read_regular(self.archive_path, within=self.workspace)
        except FileNotFoundError:
            return []
        return [e for raw in data.split(b"\n") if (e := parse_line(raw.decode("utf-8", "replace")))]

    def _archive_last_cursor(self) -> int:
        """The cursor of the archive's last valid line (its tail only is read)."""
        try:
            with _unsafe_link_is_storage_error(), open_regular(self.archive_path, within=self.workspace) as fh:
                size = fh.seek(0, os.SEEK_END)
                block = 4096
                while True:
                    start = max(0, size - block)
                    fh.seek(start)
                    lines = fh.read(size - start).split(b"\n")
                    for raw in reversed(lines[1:] if start else lines):
                        entry = parse_line(raw.decode("utf-8", "replace"))
                        if entry is not None:
                            return entry.cursor
                    if start == 0:
                        return 0
                    block *= 2
        except FileNotFoundError:
            return 0

    def archive_processed(self) -> int:
        """Move the entries Dream has processed to ``history.archive.jsonl``; return how many.

        ``history.jsonl`` then holds only what is pending, so reading it every turn costs
        what is pending, not the whole past. The moved lines are appended to the archive
        (fsynced) *before* history.jsonl is rewritten atomically, all under the lock: a
        crash in between leaves a line in both files, and the next call skips what the
        archive already holds. Invalid lines among the processed part move with it, byte
        for byte. Recall searches both files.
        """
        with self._locked():
            try:
                with _unsafe_link_is_storage_error():
                    data = read_regular(self.history_path, within=self.workspace)
            except FileNotFoundError:
                return 0
            dream = self.dream_cursor()
            raws = data.split(b"\n")
            cut = 0  # lines [0, cut) are processed
            for i, raw in enumerate(raws):
                entry = parse_line(raw.decode("utf-8", errors="replace"))
                if entry is None:
                    continue
                if entry.cursor > dream:
                    break
                cut = i + 1
            if cut == 0:
                return 0
            self.stats.full_reads += 1
            already = self._archive_last_cursor()
            moving = []
            for raw in raws[:cut]:
                if not raw.strip():
                    continue
                entry = parse_line(raw.decode("utf-8", errors="replace"))
                if entry is not None and entry.cursor <= already:
                    continue  # a crash after the archive write: it is there already
                moving.append(raw)
            counter = max(self._counter() or 0, self._history.last_cursor())
            if moving:
                self._append_archive(b"".join(r + b"\n" for r in moving))
            atomic_write_bytes(self.history_path, b"\n".join(raws[cut:]))
            if counter:
                atomic_write_text(self.cursor_path, str(counter))
            self._history.forget()
        return sum(1 for r in raws[:cut] if r.strip())

    def _append_archive(self, data: bytes) -> None:
        try:
            fd = open_fd(self.archive_path, within=self.workspace,
                         flags=os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            raise StorageError(f"could not open {self.archive_path}: {exc}") from exc
        try:
            st = os.fstat(fd)
            if st.st_size > 0:
                with open_regular(self.archive_path, within=self.workspace) as fh:
                    fh.seek(st.st_size - 1)
                    if fh.read(1) != b"\n":
                        data = b"\n" + data
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            raise StorageError(
                f"could not append to {self.archive_path}: {exc}; history.jsonl is unchanged"
            ) from exc
        finally:
            os.close(fd)

    # --- compaction -------------------------------------------------------------------------

    def compact_history(self, keep: int = DEFAULT_KEEP_ENTRIES) -> int:
        """Drop the oldest processed entries so at most ``keep`` remain; return how many.

        Entries after the dream cursor are never dropped, even if that keeps more than
        ``keep``. Invalid lines among the dropped part go too; later lines are kept
        byte for byte. Cursors stay monotonic because ``.cursor`` is not lowered.
        """
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        with self._locked():
            try:
                with _unsafe_link_is_storage_error():
                    data = read_regular(self.history_path, within=self.workspace)
            except FileNotFoundError:
                return 0
            self.stats.full_reads += 1
            raws = data.split(b"\n")
            # (line index, cursor) of every valid entry, in file order
            valid = [
                (i, entry.cursor)
                for i, raw in enumerate(raws)
                if (entry := parse_line(raw.decode("utf-8", errors="replace"))) is not None
            ]
            dream = self.dream_cursor()
            first_pending = next(
                (n for n, (_, cursor) in enumerate(valid) if cursor > dream), len(valid)
            )
            drop = min(max(0, len(valid) - keep), first_pending)
            if drop == 0:
                return 0
            counter = max(self._counter() or 0, self._history.last_cursor())
            start = valid[drop][0] if drop < len(valid) else valid[-1][0] + 1
            kept = b"\n".join(raws[start:])
            atomic_write_bytes(self.history_path, kept)
            if counter:
                atomic_write_text(self.cursor_path, str(counter))
            self._history.forget()
        pending = len(valid) - first_pending
        if pending > keep:
            logger.warning(
                "%d history entries are waiting for Dream (more than %d); run `hippobot dream`",
                pending,
                keep,
            )
        return drop

    # --- legacy migration -------------------------------------------------------------------

    def migrate_legacy(self) -> int:
        """Turn nanobot's ``memory/HISTORY.md`` into ``history.jsonl`` once.

        Runs only when HISTORY.md exists and history.jsonl is missing or blank. The old
        archive counts as already processed (both cursors set to the number of entries),
        and HISTORY.md is renamed to ``HISTORY.md.bak`` (``.bak.2``, … if taken), never
        deleted. Returns the number of entries migrated.
        """
        if not self.legacy_history_path.is_file():
            return 0
        with self._locked():
            if not self.legacy_history_path.is_file() or self._history_has_content():
                return 0
            with _unsafe_link_is_storage_error():
                raw = read_regular(self.legacy_history_path, within=self.workspace)
            mtime = datetime.fromtimestamp(self.legacy_history_path.stat().st_mtime)
            entries = split_legacy_history(
                raw.decode("utf-8", errors="replace"), format_timestamp(mtime)
            )
            count = len(entries)
            if count:
                # Cursors first: a crash before the history write just repeats the migration.
                atomic_write_text(self.cursor_path, str(count))
                atomic_write_text(self.dream_cursor_path, str(count))
                body = "".join(entry.to_json() + "\n" for entry in entries)
                atomic_write_text(self.history_path, body)
            backup = self._backup_name()
            try:
                os.replace(self.legacy_history_path, backup)
            except OSError as exc:
                raise StorageError(f"could not rename {self.legacy_history_path}: {exc}") from exc
            self._history.forget()
        logger.warning(
            "migrated %d entries from %s into %s; the old file is kept as %s",
            count,
            self.legacy_history_path.name,
            self.history_path.name,
            backup.name,
        )
        return count

    def legacy_entries(self) -> list[HistoryEntry]:
        """What :meth:`migrate_legacy` would bring over, read without writing (empty when
        there is nothing to migrate). They count as processed, as migrated entries do."""
        if not self.legacy_history_path.is_file() or self._history_has_content():
            return []
        try:
            raw = read_regular(self.legacy_history_path, within=self.workspace)
            mtime = datetime.fromtimestamp(self.legacy_history_path.stat().st_mtime)
        except OSError:
            return []
        return split_legacy_history(raw.decode("utf-8", errors="replace"), format_timestamp(mtime))

    def _history_has_content(self) -> bool:
        try:
            with _unsafe_link_is_storage_error(), open_regular(self.history_path, within=self.workspace) as fh:
                while chunk := fh.read(65536):
                    if chunk.strip():
                        return True
        except FileNotFoundError:
            return False
        return False

    def _backup_name(self) -> Path:
        n = 1
        while (candidate := self._paths.legacy_history_backup(n)).exists():
            n += 1
        return candidate
