"""One request at a time per local endpoint, from one hippobot home (SPEC 4.1, point 7).

A local model (llama.cpp, Ollama, vLLM on a laptop) works on one request at a time. A second
request either queues behind the first inside the server, unseen (its sender waits twice as
long, and a client that gives up and sends it again queues a third copy), or, with some
servers' defaults (llama-cpp-python's ``interrupt_requests``), cancels the one running, so a
background Dream and a chat turn cancel each other in a loop. Requests to such an endpoint
therefore wait their turn here, in the client, where the order can be chosen and the wait
shown:

* **One at a time**, across every process and workspace of the home (``serve`` users
  included): the request being sent holds the endpoint's ``slot`` lock
  (:meth:`hippobot.workspace.Home.endpoint`) until its reply is read to the end, or fails.
* **Chats first.** Background work (code inside :func:`background`: scheduled
  consolidations, Dream) waits while any chat waits for the endpoint or uses it: chats hold
  the ``chats`` lock shared, and a background request keeps the slot only if it can take
  ``chats`` exclusively for an instant. A background request already running is never
  cancelled; the chat waits for it, and for it only. A whole chat turn keeps its claim
  between its requests (:meth:`EndpointGate.chat_turn`), so a Dream request cannot slip in
  while the chat runs a tool.
* **Never on the event loop:** every wait polls a non-blocking ``flock``
  (:func:`hippobot.locks.acquire_async`); a process that dies releases its locks with it.
* **Visible:** a request that must wait yields :class:`~hippobot.providers.base.Queued`
  (naming the work it waits behind, from the ``holder`` note) and then
  :class:`~hippobot.providers.base.Started` when its turn comes.

A lock file that cannot be created (a read-only home) never stops a request: it is sent
without queueing, and the log says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from pathlib import Path

from hippobot.atomic import atomic_write_text
from hippobot.errors import StorageError
from hippobot.locks import HeldLock, LockTimeout, acquire_async
from hippobot.providers.base import ChatRequest, Provider, Queued, Started, StreamEvent
from hippobot.providers.endpoints import is_local
from hippobot.providers.metering import current_job
from hippobot.workspace import EndpointFiles

__all__ = ["EndpointGate", "SerialProvider", "background", "in_background", "serial_enabled"]

log = logging.getLogger(__name__)

# What the holder note calls each kind of work (the usage ledger's job names).
_WORK_NAMES = {"turn": "a chat", "consolidation": "consolidation", "dream": "Dream"}

_BACKGROUND: ContextVar[bool] = ContextVar("hippobot_background_work", default=False)
# Set inside EndpointGate.chat_turn: the turn's requests need no claim of their own (and,
# where shared locks fall back to exclusive ones, must not take a second one).
_CLAIMED: ContextVar[bool] = ContextVar("hippobot_chat_claimed", default=False)


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Model requests made inside this block, and in tasks started from it, are background
    work: they wait for every chat of the home (see the module docstring)."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


def in_background() -> bool:
    return _BACKGROUND.get()


def serial_enabled(mode: str, *, provider: str, api_base: str | None) -> bool:
    """``agents.defaults.serialRequests``: ``on``, ``off``, or ``auto`` (local endpoints)."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return is_local(provider, api_base)


# --- the gate --------------------------------------------------------------------------


class _NoLock:
    """Stands in for a lock that could not be taken because its file cannot be created."""

    def release(self) -> None:
        return None


class EndpointGate:
    """The queue of one endpoint for one home: its :class:`~hippobot.workspace.EndpointFiles`
    and how often waiters look again (chats often: they are who the user waits for)."""

    def __init__(self, files: EndpointFiles, *, poll: float = 0.02, background_poll: float = 0.1) -> None:
        self.files = files
        self.poll = poll
        self.background_poll = background_poll
        self._warned = False

    def _unusable(self, exc: OSError) -> _NoLock:
        if not self._warned:
            self._warned = True
            log.warning("model requests are not queued (cannot create %s: %s)",
                        self.files.slot, exc.strerror or exc)
        return _NoLock()

    async def _lock(self, path: Path, *, timeout: float, shared: bool = False,
                    poll: float = 0.02) -> HeldLock | _NoLock | None:
        """The lock, or None when it stayed taken for ``timeout`` (0: tried once)."""
        try:
            return await acquire_async(path, timeout=timeout, poll=poll, shared=shared)
        except LockTimeout:
            return None
        except OSError as exc:
            return self._unusable(exc)

    async def claim_chat(self) -> HeldLock | _NoLock:
        """Say "a chat waits or runs" until released (background work holds ``chats`` only
        for an instant, so this never waits long)."""
        mark = await self._lock(self.files.chats, timeout=-1, shared=True, poll=0.005)
        assert mark is not None  # waited without a time limit
        return mark

    @contextlib.asynccontextmanager
    async def chat_turn(self) -> AsyncIterator[None]:
        """A chat turn: background requests wait from now until the block ends, also while
        the chat runs its tools between two requests."""
        mark = await self.claim_chat()
        token = _CLAIMED.set(True)
        try:
            yield
        finally:
            _CLAIMED.reset(token)
            mark.release()

    async def try_slot(self, *, chat: bool) -> HeldLock | _NoLock | None:
        """The slot if it is free now (for background work: and no chat claims it)."""
        slot = await self._lock(self.files.slot, timeout=0)
        if slot is None or chat:
            return slot
        chats = await self._lock(self.files.chats, timeout=0)
        if chats is None:
            slot.release()
            return None
        chats.release()
        return slot

    async def wait_slot(self, *, chat: bool) -> HeldLock | _NoLock:
        """The slot, however long it takes (cancelling the wait gives it up cleanly)."""
        if chat:
            slot = await self._lock(self.files.slot, timeout=-1, poll=self.poll)
            assert slot is not None  # waited without a time limit
            return slot
        while True:
            await asyncio.sleep(self.background_poll)
            slot = await self.try_slot(chat=False)
            if slot is not None:
                return slot

    async def note_holder(self) -> None:
        """Tell waiters what the slot is used for (the request's job, this process)."""
        note = {"work": current_job(), "pid": os.getpid(), "since": time.time()}
        await asyncio.to_thread(_write_note, self.files.holder, json.dumps(note))

    async def holder(self) -> str:
        """What the request holding the slot works for ("Dream", "a chat", ...)."""
        note = await asyncio.to_thread(_read_note, self.files.holder)
        return _WORK_NAMES.get(str(note.get("work")), "another request")


def _write_note(path: Path, text: str) -> None:
    # Only a display hint, written before every request: not worth two fsyncs, and a full
    # disk must not fail the request.
    with contextlib.suppress(StorageError):
        atomic_write_text(path, text, durable=False)


def _read_note(path: Path) -> dict[str, object]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class SerialProvider:
    """``inner`` behind an :class:`EndpointGate`: one request of the home at a time, chats
    before background work."""

    def __init__(self, inner: Provider, gate: EndpointGate) -> None:
        self.inner = inner
        self.gate = gate
        self.name = inner.name

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        gate, chat = self.gate, not in_background()
        mark = await gate.claim_chat() if chat and not _CLAIMED.get() else None
        slot = None
        note: asyncio.Future[None] | None = None
        try:
            slot = await gate.try_slot(chat=chat)
            if slot is None:
                yield Queued(await gate.holder())
                slot = await gate.wait_slot(chat=chat)
                yield Started()
            # Written while the request goes out (a display hint: the request need not wait
            # for it), and before the slot is given up, so it never outlives the holding.
            note = asyncio.ensure_future(gate.note_holder())
            async for event in self.inner.stream(request):
                yield event
        finally:
            try:
                if note is not None:
                    await asyncio.shield(note)
            finally:
                if slot is not None:
                    slot.release()
                if mark is not None:
                    mark.release()

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
