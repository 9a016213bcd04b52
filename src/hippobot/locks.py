"""Cross-process file locks cheap enough for every turn.

A turn takes several locks (the turn itself, each append to the session file). The general
purpose ``filelock`` package costs about 0.3–0.5 ms per acquire/release here, a plain
``flock(2)`` about 10 µs, so the hot path uses this module. Semantics:

* :func:`locked` — blocking (with a timeout) and re-entrant within a thread; threads of one
  process exclude each other through an ``RLock`` shared by every user of the same path, and
  processes through ``flock`` on one descriptor held while the lock is held.
* :func:`acquire_async` / :func:`locked_async` — for coroutines: polls a non-blocking ``flock`` with ``asyncio.sleep`` so
  the event loop is never blocked; not re-entrant (callers serialise per key with an
  ``asyncio.Lock`` first). ``shared=True`` takes a shared lock: any number of shared holders
  at once, none while someone holds it exclusively (how "a chat is waiting" is told to
  background work, :mod:`hippobot.providers.serial`).
* :class:`PathLock` — one or several of these locks (taken in sorted order, so two holders
  of overlapping sets never deadlock) usable both ways: ``with`` in a worker thread,
  ``async with`` on the event loop. This is the one lock API for files several writers
  change (see :mod:`hippobot.workspace` for the names). Never use the ``with`` form on the
  event loop thread: waiting there freezes every session of a server.

Because ``flock`` locks belong to an open file description, a coroutine holding a lock
through :func:`acquire_async` also excludes threads of the same process (and vice versa).

Where ``fcntl`` does not exist (Windows), both fall back to the ``filelock`` package.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["HeldLock", "LockTimeout", "PathLock", "acquire_async", "locked", "locked_async", "many"]

_POLL_S = 0.005


class LockTimeout(TimeoutError):
    """The lock stayed held by someone else for the whole timeout."""


class _PathLock:
    __slots__ = ("__weakref__", "depth", "fd", "path", "rlock")

    def __init__(self, path: str) -> None:
        self.path = path
        self.rlock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None


_registry: weakref.WeakValueDictionary[str, _PathLock] = weakref.WeakValueDictionary()
_registry_guard = threading.Lock()


def _path_lock(path: str) -> _PathLock:
    with _registry_guard:
        lock = _registry.get(path)
        if lock is None:
            lock = _registry[path] = _PathLock(path)
        return lock


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:  # the locks directory is derived state and may be deleted
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _try_flock(fd: int, shared: bool = False) -> bool:
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextlib.contextmanager
def locked(path: Path | str, timeout: float = -1) -> Iterator[None]:
    """Hold the lock on ``path`` (``timeout`` < 0: wait forever). Raises :class:`LockTimeout`;
    an ``OSError`` creating the lock file propagates."""
    if fcntl is None:  # pragma: no cover
        import filelock

        try:
            with filelock.FileLock(str(path), timeout=timeout):
                yield
        except filelock.Timeout as exc:
            raise LockTimeout(str(path)) from exc
        return
    lock = _path_lock(str(path))
    deadline = None if timeout < 0 else time.monotonic() + timeout
    if not lock.rlock.acquire(timeout=-1 if deadline is None else max(0.0, timeout)):
        raise LockTimeout(str(path))
    try:
        if lock.depth == 0:
            fd = _open(lock.path)
            while not _try_flock(fd):
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(str(path))
                time.sleep(_POLL_S)
            lock.fd = fd
        lock.depth += 1
    except BaseException:
        lock.rlock.release()
        raise
    try:
        yield
    finally:
        lock.depth -= 1
        if lock.depth == 0 and lock.fd is not None:
            fd, lock.fd = lock.fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        lock.rlock.release()


class HeldLock:
    """A lock taken with :func:`acquire_async`; call :meth:`release` exactly once."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


async def acquire_async(
    path: Path | str, timeout: float = -1, poll: float = 0.05, *, shared: bool = False
) -> HeldLock:
    """Take the lock on ``path`` without blocking the event loop. With ``timeout`` ≥ 0 it
    raises :class:`LockTimeout` when the time runs out (0: try once). Not re-entrant: callers
    serialise per key with an ``asyncio.Lock`` first. ``shared``: a shared lock (without
    ``fcntl`` it is exclusive). An ``OSError`` creating the lock file propagates."""
    deadline = None if timeout < 0 else time.monotonic() + timeout
    if fcntl is None:  # pragma: no cover
        import filelock

        flock = filelock.FileLock(str(path), thread_local=False)
        while True:
            try:
                flock.acquire(timeout=0)
                return HeldLock(flock.release)
            except filelock.Timeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeout(str(path)) from None
                await asyncio.sleep(poll)
    fd = _open(str(path))
    try:
        while not _try_flock(fd, shared):
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(str(path))
            await asyncio.sleep(poll)
    except BaseException:
        os.close(fd)
        raise

    def release() -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return HeldLock(release)


@contextlib.asynccontextmanager
async def locked_async(path: Path | str, timeout: float = -1, poll: float = 0.05) -> AsyncIterator[None]:
    """``async with`` form of :func:`acquire_async`."""
    held = await acquire_async(path, timeout, poll)
    try:
        yield
    finally:
        held.release()


class PathLock:
    """The locks on ``paths`` as one lock, for threads (``with``) and coroutines
    (``async with``). ``timeout`` < 0 waits forever, 0 tries once; running out raises
    :class:`LockTimeout`. An ``OSError`` creating a lock file propagates."""

    def __init__(self, paths: Path | str | list[Path] | list[str], timeout: float = -1) -> None:
        items = paths if isinstance(paths, list) else [paths]
        self.paths = sorted({os.fspath(p) for p in items})
        self.timeout = timeout
        self._stack: contextlib.ExitStack | None = None
        self._held: list[HeldLock] = []

    def __repr__(self) -> str:
        return f"PathLock({self.paths!r})"

    # -- threads --

    def __enter__(self) -> PathLock:
        stack = contextlib.ExitStack()
        deadline = None if self.timeout < 0 else time.monotonic() + self.timeout
        try:
            for path in self.paths:
                left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
                stack.enter_context(locked(path, timeout=left))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    # -- coroutines --

    async def __aenter__(self) -> PathLock:
        deadline = None if self.timeout < 0 else time.monotonic() + self.timeout
        held: list[HeldLock] = []
        try:
            for path in self.paths:
                left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
                held.append(await acquire_async(path, timeout=left, poll=_ASYNC_POLL_S))
        except BaseException:
            for h in reversed(held):
                h.release()
            raise
        self._held = held
        return self

    async def __aexit__(self, *exc: object) -> None:
        held, self._held = self._held, []
        for h in reversed(held):
            h.release()


_ASYNC_POLL_S = 0.02


def many(paths: list[Path] | list[str], timeout: float = -1) -> PathLock:
    """One :class:`PathLock` over several lock files."""
    return PathLock(paths, timeout)
