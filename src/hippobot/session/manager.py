"""One Session object per key, per-key turn locks, and storage calls off the event loop."""

from __future__ import annotations

import asyncio
import builtins
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from hippobot.messages import Message
from hippobot.session.keys import validate_key
from hippobot.session.model import Session
from hippobot.session.store import SessionInfo, SessionStore

__all__ = ["SessionManager"]

T = TypeVar("T")


async def _settle(task: asyncio.Future[T]) -> T:
    """Await a worker-thread task to its end even if the caller is cancelled meanwhile.

    A thread cannot be stopped, and memory must match what it did to the disk; a
    cancellation is re-raised once the work has finished.
    """
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    return task.result()


async def _in_thread(func: Callable[..., T], *args: object) -> T:
    return await _settle(asyncio.ensure_future(asyncio.to_thread(func, *args)))


class SessionManager:
    """Thin layer over a :class:`SessionStore`.

    * ``get`` returns the same object for a key while anyone holds it: a strong LRU
      cache of ``cache_size`` entries, plus weak references to evicted sessions still in
      use elsewhere.
    * ``lock(key)`` is the turn lock (SPEC 4.1): the same ``asyncio.Lock`` for a key while
      anyone holds or awaits it; idle locks are garbage-collected.
    * Store calls for one session never overlap (an internal per-session I/O lock), so a
      background consolidation saving pointers cannot race the turn appending messages.
      ``append`` is all-or-nothing: if the disk refuses the write, the messages are
      taken out of the session again and the :class:`~hippobot.errors.StorageError`
      propagates.
    """

    def __init__(self, store: SessionStore, *, cache_size: int = 128) -> None:
        self.store = store
        self._cache_size = max(1, cache_size)
        self._cache: OrderedDict[str, Session] = OrderedDict()
        self._evicted: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._io_locks: weakref.WeakKeyDictionary[Session, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # -- identity --

    def _cached(self, key: str) -> Session | None:
        session = self._cache.get(key) or self._evicted.get(key)
        if session is not None:
            self._remember(session)
        return session

    def _remember(self, session: Session) -> None:
        self._cache[session.key] = session
        self._cache.move_to_end(session.key)
        self._evicted.pop(session.key, None)
        while len(self._cache) > self._cache_size:
            old_key, old = self._cache.popitem(last=False)
            self._evicted[old_key] = old

    def get(self, key: str) -> Session:
        """The session for ``key``: cached, loaded, or new (written on its first append).

        Loading reads the file on the calling thread; async code that may hit a large
        uncached session can use :meth:`aget`.
        """
        validate_key(key)
        session = self._cached(key)
        if session is None:
            session = self.store.load(key) or Session(key=key)
            self._remember(session)
        return session

    async def aget(self, key: str) -> Session:
        """:meth:`get` with the file read in a worker thread."""
        validate_key(key)
        session = self._cached(key)
        if session is not None:
            return session
        loaded = await _in_thread(self.store.load, key)
        session = self._cached(key)  # another task may have loaded it meanwhile
        if session is None:
            session = loaded or Session(key=key)
            self._remember(session)
        return session

    async def current(self, key: str) -> Session:
        """The session for ``key`` as it is on disk now, for a caller holding its turn
        lock: a cached one refreshed, else loaded under the lock, which is current without
        a second look (one trip to a worker thread either way)."""
        validate_key(key)
        session = self._cached(key)
        if session is None:
            loaded = await _in_thread(self.store.load, key)
            session = self._cached(key)
            if session is None:
                session = loaded or Session(key=key)
                self._remember(session)
                return session
        # cached, or loaded by another task meanwhile (perhaps before the lock was taken)
        await self.refresh(session)
        return session

    def lock(self, key: str) -> asyncio.Lock:
        """The per-key turn lock."""
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def _io_lock(self, session: Session) -> asyncio.Lock:
        lock = self._io_locks.get(session)
        if lock is None:
            lock = self._io_locks[session] = asyncio.Lock()
        return lock

    # -- persistence --

    async def append(self, session: Session, *messages: Message) -> list[Message]:
        """Add ``messages`` to ``session`` and persist them; returns the stored copies."""
        async with self._io_lock(session):
            updated_at = session.updated_at
            stored = [session.add(m) for m in messages]
            task = asyncio.ensure_future(asyncio.to_thread(self.store.append, session, stored))
            try:
                await _settle(task)
            except BaseException:
                if task.cancelled() or task.exception() is not None:  # not on disk: undo
                    ids = {id(m) for m in stored}
                    session.messages[:] = [m for m in session.messages if id(m) not in ids]
                    session.updated_at = updated_at
                raise
            return stored

    async def save_meta(self, session: Session) -> None:
        async with self._io_lock(session):
            await _in_thread(self.store.save_meta, session)

    async def rewrite(self, session: Session) -> None:
        async with self._io_lock(session):
            await _in_thread(self.store.rewrite, session)

    async def refresh(self, session: Session) -> int:
        """Pick up messages another process appended; returns how many."""
        async with self._io_lock(session):
            return await _in_thread(self.store.refresh, session)

    async def delete(self, key: str) -> bool:
        """Delete the stored session and forget the cached object."""
        self._cache.pop(key, None)
        self._evicted.pop(key, None)
        return await _in_thread(self.store.delete, key)

    def list(self) -> builtins.list[SessionInfo]:
        return self.store.list()
