"""One SDK client per event loop, dropped after a cancelled call.

An SDK client pools HTTP connections, and those belong to the event loop that opened them, so
a client is created per loop. When a call is cancelled (Ctrl-C on a turn, a server shutting
down) while its request is in flight, the connection can go back to the pool with the answer
still unread, and the next request on it would read that stale answer. So a cancelled call
discards the whole client; the next call builds a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["LoopBoundClient"]

C = TypeVar("C")


class LoopBoundClient(Generic[C]):
    def __init__(self, factory: Callable[[], C]) -> None:
        self._factory = factory
        self._client: C | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: set[asyncio.Task[Any]] = set()

    def get(self) -> C:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = self._factory()
            self._loop = loop
        return self._client

    def discard(self, client: C) -> None:
        """Forget ``client`` (if it is the current one) and close it in the background."""
        if self._client is client:
            self._client, self._loop = None, None
        close = getattr(client, "close", None)
        if close is None:
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to schedule on
            task = asyncio.get_running_loop().create_task(_quietly(close))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await _quietly(client.close)  # type: ignore[attr-defined]


async def _quietly(close: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):
        await close()
