"""Session persistence: append-only JSON Lines, safe across crashes and processes.

The format is in :mod:`hippobot.session.records`. Saving a turn appends its message
lines (and maybe one meta record) in a single ``os.write`` on an ``O_APPEND`` descriptor
while holding a cross-process file lock in ``.hippobot/locks/``; the bytes written are
proportional to the turn. Only :meth:`JsonlSessionStore.rewrite` replaces a file (temp
file, fsync, rename, directory fsync), for idle compaction and repair.

Reading is forgiving: blank lines are skipped; corrupt lines are skipped with one
warning and copied once to ``<file>.corrupt``. Unparseable files are never replaced by
empty ones: a wholly unreadable file loads as an empty session and appends go after the
existing bytes (a torn last line is first closed with ``\\n`` so it stays an isolated
bad line).
"""

from __future__ import annotations

import builtins
import copy
import errno
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from hippobot.atomic import atomic_write_bytes
from hippobot.errors import StorageError
from hippobot.locks import LockTimeout, locked
from hippobot.messages import Message
from hippobot.safeio import open_fd, open_regular, read_regular
from hippobot.session.keys import key_to_relpath, relpath_to_key
from hippobot.session.legacy import LegacyIndex, read_legacy, warn_if_shadowed
from hippobot.session.model import ArchiveWait, Session, normalise_offset, now_iso
from hippobot.session.records import (
    DEFAULT_META,
    FORMAT_VERSION,
    apply_meta,
    as_datetime,
    check_format,
    encode,
    later,
    meta_record,
    meta_state,
    parse,
    preview,
    snapshot,
)
from hippobot.workspace import SESSION_SUFFIX, SESSIONS_DIR, Workspace

__all__ = [
    "FORMAT_VERSION",
    "InMemorySessionStore",
    "JsonlSessionStore",
    "SessionInfo",
    "SessionStore",
]

logger = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SessionInfo:
    """One row of ``hippobot sessions list``. ``path`` is ``None`` for in-memory stores."""

    key: str
    path: Path | None
    created_at: str
    updated_at: str
    message_count: int  # since the last /new
    preview: str
    size_bytes: int
    earlier_count: int = 0  # messages before the last /new
    archive_wait: ArchiveWait | None = None  # messages that still have to reach the archive


class SessionStore(Protocol):
    """Where sessions live. Implementations: :class:`JsonlSessionStore`, in-memory."""

    def load(self, key: str) -> Session | None:
        """The stored session, or ``None`` if there is none (the caller creates one)."""
        ...

    def append(self, session: Session, messages: Sequence[Message]) -> None:
        """Persist ``messages``, already the last entries of ``session.messages``."""
        ...

    def save_meta(self, session: Session) -> None:
        """Persist pointers, summary, usage and metadata."""
        ...

    def rewrite(self, session: Session) -> None:
        """Atomically replace the stored session with ``session`` (compaction, repair)."""
        ...

    def delete(self, key: str) -> bool:
        """Remove the session; ``True`` if something was removed."""
        ...

    def refresh(self, session: Session) -> int:
        """Apply what other writers stored since; returns the number of new messages."""
        ...

    def list(self) -> builtins.list[SessionInfo]:
        """Every stored session, most recently updated first."""
        ...


def _mtime_iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="milliseconds")


def _sort_key(info: SessionInfo) -> float:
    moment = as_datetime(info.updated_at)
    return moment.timestamp() if moment else 0.0


# --- JSONL store ------------------------------------------------------------------


@dataclass
class _Tracked:
    """What this store last saw of a session's file: which file, how far, which meta."""

    inode: int
    offset: int
    meta: dict[str, Any]


@contextmanager
def _storage_errors(path: Path, verb: str = "write") -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StorageError(
            f"cannot {verb} {path}: {reason}; the file was left unchanged"
        ) from exc


def _write_all(fd: int, data: bytes, restore_size: int) -> None:
    """Write ``data`` (normally in one ``os.write``); on failure cut back to ``restore_size``."""
    view = memoryview(data)
    written = 0
    try:
        while written < len(data):
            count = os.write(fd, view[written:])
            if count <= 0:
                raise OSError(5, "short write")
            written += count
    except OSError:
        try:
            os.ftruncate(fd, restore_size)
        except OSError as exc:
            logger.error("could not undo a partial write (fd %d): %s", fd, exc)
        raise


def _last_byte(fd: int, size: int) -> bytes:
    os.lseek(fd, size - 1, os.SEEK_SET)  # O_APPEND still sends writes to the end
    return os.read(fd, 1)


class JsonlSessionStore:
    """Sessions as files under ``<workspace>/sessions/`` (format in the module docstring).

    Thread- and process-safe per key: every read-modify step holds the key's file lock.
    Callers must not run two operations on the *same Session object* at once (the
    :class:`~hippobot.session.manager.SessionManager` serialises them).

    ``read_only`` opens the files for reading only: no lock file, no ``.corrupt`` copy, and
    every write raises :class:`StorageError` (reading without the lock is consistent:
    writers append whole lines in one write or replace a file atomically).
    """

    def __init__(self, workspace: Path, *, fsync: bool = False, read_only: bool = False) -> None:
        self.workspace = Path(workspace)
        self.read_only = read_only
        self._paths = Workspace(self.workspace)
        self.root = self._paths.sessions_dir
        self._fsync = fsync
        self._legacy = LegacyIndex(self.root)
        self._tracked: weakref.WeakKeyDictionary[Session, _Tracked] = (
            weakref.WeakKeyDictionary()
        )
        self._guard = threading.Lock()

    # -- paths and locks --

    def path_for(self, key: str) -> Path:
        return self.workspace / key_to_relpath(key)

    def _corrupt_path(self, path: Path) -> Path:
        return Workspace.corrupt_copy(path)

    @contextmanager
    def _locked(self, key: str, *, reading: bool = False) -> Iterator[None]:
        """Hold the session's cross-process lock.

        A reader on a workspace it cannot write (read-only disk or permissions) reads without
        the lock: writers only ever append whole lines in one write, and a torn tail is skipped,
        so such a read is still consistent.
        """
        if self.read_only:
            if not reading:
                raise StorageError(
                    f"session {key} was opened read-only; nothing was written"
                )
            yield
            return
        lock_path = self._paths.session_lock(key_to_relpath(key).relative_to(SESSIONS_DIR))
        stack = ExitStack()
        try:
            stack.enter_context(locked(lock_path, timeout=LOCK_TIMEOUT_S))
        except LockTimeout:
            raise StorageError(
                f"timed out waiting for {lock_path}: another hippobot process holds it"
            ) from None
        except OSError as exc:
            if reading and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                yield
                return
            raise StorageError(
                f"cannot lock {lock_path}: {exc.strerror or exc}; the file was left unchanged"
            ) from exc
        with stack:
            yield

    def _get_tracked(self, session: Session) -> _Tracked | None:
        with self._guard:
            return self._tracked.get(session)

    def _track(self, session: Session, inode: int, offset: int, meta: dict[str, Any]) -> None:
        with self._guard:
            self._tracked[session] = _Tracked(inode, offset, meta)

    # -- reading --

    def load(self, key: str) -> Session | None:
        path = self.path_for(key)
        legacy = self._legacy.lookup(key)
        if not path.exists():
            # Reading never writes: the first append or meta save creates the canonical file.
            if legacy is None:
                return None
            with _storage_errors(legacy, "read"):
                try:
                    return read_legacy(legacy, key, within=self.workspace)
                except FileNotFoundError:
                    return None
        with self._locked(key, reading=True), _storage_errors(path, "read"):
            try:
                # a FIFO or device: an error, never a hang; a link out of the workspace (to
                # another user's session, say) is an error too, never read
                handle = open_regular(path, within=self.workspace)
            except FileNotFoundError:
                return None
            with handle:
                stat = os.fstat(handle.fileno())
                data = handle.read()
            parsed = parse(data, at_start=True)
            check_format(parsed.header, path)
            header = parsed.header or {}
            first_time = next(
                (m["timestamp"] for m in parsed.messages if isinstance(m.get("timestamp"), str)),
                None,
            )
            created = header.get("created_at")
            if not isinstance(created, str):
                created = first_time or _mtime_iso(stat.st_mtime)
            session = Session(key=key, messages=parsed.messages, created_at=created)
            if parsed.meta:
                apply_meta(session, parsed.meta)
            session.updated_at = parsed.last_time or created
            self._quarantine(path, parsed.corrupt)
            self._track(session, stat.st_ino, len(data), meta_state(session))
        if legacy is not None:
            warn_if_shadowed(key, legacy, session.metadata, path)
        return session

    def refresh(self, session: Session) -> int:
        path = self.path_for(session.key)
        with self._locked(session.key, reading=True), _storage_errors(path, "read"):
            return self._sync(session, pending=0, adopt_meta=True, full_ok=True)

    def _sync(self, session: Session, *, pending: int, adopt_meta: bool, full_ok: bool) -> int:
        """Read what was written since we last looked (lock held); ``pending`` tail
        messages of ``session`` are not on disk yet and stay last."""
        path = self.path_for(session.key)
        tracked = self._get_tracked(session)
        try:
            handle = open_regular(path, within=self.workspace)
        except FileNotFoundError:
            if tracked is not None:
                # We had read this session from its file and the file is gone: it was
                # deleted (``hippobot sessions delete``). What we hold in memory is the
                # deleted conversation; it must not be written back.
                self._forget_deleted(session, pending)
            return 0
        with handle:
            stat = os.fstat(handle.fileno())
            same_file = (
                tracked is not None
                and tracked.inode == stat.st_ino
                and stat.st_size >= tracked.offset
            )
            if same_file and tracked is not None:
                start = tracked.offset
                if stat.st_size == start:
                    return 0
                handle.seek(start)
            elif full_ok:
                start = 0  # new to us, or replaced/truncated by someone else: read it all
            else:
                return 0
            data = handle.read()
        if not data:  # an empty file: the next write puts the whole session in it
            if tracked is not None and start == 0:
                self._forget_deleted(session, pending)  # emptied by someone else
            return 0
        parsed = parse(data, at_start=start == 0)
        if start == 0:
            check_format(parsed.header, path)
        baseline = tracked.meta if tracked else DEFAULT_META
        untouched = meta_state(session) == baseline
        cut = len(session.messages) - pending
        before = cut
        if start == 0:
            session.messages[:cut] = parsed.messages
            created = (parsed.header or {}).get("created_at")
            if isinstance(created, str):
                session.created_at = created
        else:
            session.messages[cut:cut] = parsed.messages
        added = max(0, len(session.messages) - pending - before)
        session.last_consolidated = normalise_offset(
            session.last_consolidated, len(session.messages)
        )
        meta = baseline
        if parsed.meta and adopt_meta and untouched:
            apply_meta(session, parsed.meta)
            meta = meta_state(session)
        if parsed.last_time:
            session.updated_at = later(session.updated_at, parsed.last_time)
        self._quarantine(path, parsed.corrupt)
        self._track(session, stat.st_ino, start + len(data), meta)
        return added

    def _forget_deleted(self, session: Session, pending: int) -> None:
        """Make ``session`` what a deleted file means: no stored messages, default pointers
        (the ``pending`` tail, not on disk yet, stays)."""
        del session.messages[: len(session.messages) - pending]
        apply_meta(session, {})
        session.created_at = session.updated_at = now_iso()
        with self._guard:
            self._tracked.pop(session, None)

    def _quarantine(self, path: Path, lines: Sequence[bytes]) -> None:
        """Copy unreadable lines to ``<file>.corrupt`` once each; warn once per call."""
        if not lines:
            return
        if self.read_only:
            logger.warning("%s: skipped %d unreadable line(s)", path, len(lines))
            return
        target = self._corrupt_path(path)
        try:
            known = (
                set(read_regular(target, within=self.workspace).split(b"\n"))
                if target.exists() else set()
            )
            fresh = list(dict.fromkeys(line for line in lines if line not in known))
            if fresh:
                fd = open_fd(target, within=self.workspace,
                             flags=os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                with os.fdopen(fd, "ab") as handle:
                    handle.write(b"".join(line + b"\n" for line in fresh))
        except OSError as exc:
            logger.warning("%s: %d unreadable line(s) skipped; could not copy them to %s: %s",
                           path, len(lines), target.name, exc)
            return
        if fresh:
            logger.warning("%s: skipped %d unreadable line(s); copies kept in %s",
                           path, len(fresh), target.name)
        else:
            logger.debug("%s: skipped %d line(s) already in %s", path, len(lines), target.name)

    # -- writing --

    def append(self, session: Session, messages: Sequence[Message]) -> None:
        batch = list(messages)
        if not batch:
            return
        path = self.path_for(session.key)
        with self._locked(session.key), _storage_errors(path):
            self._sync(session, pending=len(batch), adopt_meta=True, full_ok=True)
            self._append_locked(session, b"".join(encode(dict(m)) for m in batch), meta=False)

    def save_meta(self, session: Session) -> None:
        path = self.path_for(session.key)
        with self._locked(session.key), _storage_errors(path):
            self._sync(session, pending=0, adopt_meta=False, full_ok=True)
            self._append_locked(session, encode(meta_record(session)), meta=True)

    def _append_locked(self, session: Session, body: bytes, *, meta: bool) -> None:
        """One ``os.write`` at the end of the file; an empty file gets the whole session."""
        path = self.path_for(session.key)
        try:
            # never appended through a link out of the workspace (another user's session)
            fd = open_fd(path, within=self.workspace, flags=os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            # A new session's file appears whole (written aside, then renamed into place):
            # created empty and then killed, it would be a session file without a header.
            data = snapshot(session, with_meta=meta)
            self._track(session, self._replace(path, data), len(data), meta_state(session))
            return
        try:
            stat = os.fstat(fd)
            if stat.st_size == 0:
                data = snapshot(session, with_meta=meta)
            elif _last_byte(fd, stat.st_size) != b"\n":
                data = b"\n" + body  # isolate a torn last line instead of extending it
            else:
                data = body
            _write_all(fd, data, stat.st_size)
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        tracked = self._get_tracked(session)
        # After a whole-session write (empty file) or a meta record, disk == memory.
        keep = tracked is not None and not meta and stat.st_size > 0
        state = tracked.meta if keep and tracked is not None else meta_state(session)
        self._track(session, stat.st_ino, stat.st_size + len(data), state)

    def rewrite(self, session: Session) -> None:
        path = self.path_for(session.key)
        with self._locked(session.key), _storage_errors(path):
            # Keep lines other processes appended meanwhile; the caller's content wins otherwise.
            self._sync(session, pending=0, adopt_meta=False, full_ok=False)
            data = snapshot(session, with_meta=True)
            inode = self._replace(path, data)
            self._track(session, inode, len(data), meta_state(session))

    def _replace(self, path: Path, data: bytes) -> int:
        """Write the whole file aside and rename it into place; returns its inode."""
        atomic_write_bytes(path, data)
        return os.stat(path).st_ino

    def delete(self, key: str) -> bool:
        path = self.path_for(key)
        removed = False
        with self._locked(key), _storage_errors(path, "delete"):
            for target in (path, self._corrupt_path(path)):
                if target.exists():
                    target.unlink()
                    removed = removed or target == path
            legacy = self._legacy.lookup(key)
            if legacy is not None and legacy.exists():
                legacy.unlink()
                removed = True
            self._prune_dirs(path.parent)
        return removed

    def _prune_dirs(self, directory: Path) -> None:
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return  # not empty (or gone): stop climbing
            directory = directory.parent

    # -- listing --

    def _info(self, key: str, path: Path, *, legacy: bool) -> SessionInfo | None:
        try:
            stat = path.stat()
            if legacy:
                session = read_legacy(path, key, within=self.workspace)
            else:
                parsed = parse(read_regular(path, within=self.workspace), at_start=True)
                created = (parsed.header or {}).get("created_at")
                fallback = _mtime_iso(stat.st_mtime)
                session = Session(
                    key=key,
                    messages=parsed.messages,
                    created_at=created if isinstance(created, str) else fallback,
                    updated_at=parsed.last_time or fallback,
                )
                if parsed.meta:
                    apply_meta(session, parsed.meta)
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                logger.warning("%s: not listed: %s", path, exc.strerror or exc)
            return None  # removed while listing, or a link out of the workspace
        # After /new the listing describes the fresh conversation, as the user sees it, and
        # says how many messages came before (``sessions show`` prints both parts).
        fresh = min(session.fresh_start, len(session.messages))
        current = session.messages[fresh:]
        return SessionInfo(
            key=key,
            path=path,
            created_at=session.created_at,
            updated_at=session.updated_at,
            message_count=len(current),
            preview=preview(current),
            size_bytes=stat.st_size,
            earlier_count=fresh,
            archive_wait=session.archive_wait(),
        )

    def list(self) -> builtins.list[SessionInfo]:
        infos: dict[str, SessionInfo] = {}
        if self.root.is_dir():
            for path in sorted(self.root.rglob(f"*{SESSION_SUFFIX}")):
                key = relpath_to_key(path.relative_to(self.workspace))
                if key is not None and (info := self._info(key, path, legacy=False)):
                    infos[key] = info
        for key, path in self._legacy.entries().items():
            if key in infos:
                ours = infos[key].path
                if ours is not None:
                    meta = parse(read_regular(ours, within=self.workspace), at_start=True).meta or {}
                    metadata = meta.get("metadata")
                    warn_if_shadowed(
                        key, path, metadata if isinstance(metadata, dict) else {}, ours
                    )
            elif info := self._info(key, path, legacy=True):
                infos[key] = info
        return sorted(infos.values(), key=_sort_key, reverse=True)


# --- in memory --------------------------------------------------------------------


@dataclass
class _Stored:
    created_at: str
    messages: list[Message]
    meta: dict[str, Any] | None = None


class InMemorySessionStore:
    """The :class:`SessionStore` protocol in a dict, for tests of logic above storage."""

    def __init__(self) -> None:
        self._data: dict[str, _Stored] = {}
        self._seen: weakref.WeakKeyDictionary[Session, int] = weakref.WeakKeyDictionary()

    def load(self, key: str) -> Session | None:
        stored = self._data.get(key)
        if stored is None:
            return None
        session = Session(
            key=key, messages=copy.deepcopy(stored.messages), created_at=stored.created_at
        )
        if stored.meta:
            apply_meta(session, copy.deepcopy(stored.meta))
            session.updated_at = stored.meta["updated_at"]
        if stored.messages and isinstance(stored.messages[-1].get("timestamp"), str):
            session.updated_at = later(session.updated_at, stored.messages[-1]["timestamp"])
        self._seen[session] = len(stored.messages)
        return session

    def _catch_up(self, session: Session, pending: int) -> _Stored:
        stored = self._data.get(session.key)
        if stored is None:
            stored = self._data[session.key] = _Stored(session.created_at, [])
            stored.messages.extend(copy.deepcopy(session.messages[: len(session.messages) - pending]))
        else:
            new = copy.deepcopy(stored.messages[self._seen.get(session, 0) :])
            cut = len(session.messages) - pending
            session.messages[cut:cut] = new
        self._seen[session] = len(stored.messages)
        return stored

    def append(self, session: Session, messages: Sequence[Message]) -> None:
        stored = self._catch_up(session, len(messages))
        stored.messages.extend(copy.deepcopy(list(messages)))
        self._seen[session] = len(stored.messages)

    def save_meta(self, session: Session) -> None:
        self._catch_up(session, 0).meta = copy.deepcopy(meta_record(session))

    def rewrite(self, session: Session) -> None:
        self._data[session.key] = _Stored(
            session.created_at, copy.deepcopy(session.messages), copy.deepcopy(meta_record(session))
        )
        self._seen[session] = len(session.messages)

    def delete(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def refresh(self, session: Session) -> int:
        stored = self._data.get(session.key)
        if stored is None:
            return 0
        before = len(session.messages)
        self._catch_up(session, 0)
        return len(session.messages) - before

    def list(self) -> builtins.list[SessionInfo]:
        infos = []
        for key, stored in self._data.items():
            updated = stored.meta["updated_at"] if stored.meta else stored.created_at
            infos.append(
                SessionInfo(key, None, stored.created_at, updated, len(stored.messages),
                            preview(stored.messages), 0)
            )
        return sorted(infos, key=_sort_key, reverse=True)
