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
import functools
import importlib
import ssl
from collections.abc import Callable
from types import ModuleType
from typing import Any, Generic, TypeVar

__all__ = ["LoopBoundClient", "http_client", "sent_as_is"]

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


# Parameters that grow with the conversation. Both SDKs walk every parameter of every request
# through a type-directed transform (TypedDict by TypedDict, key by key) that costs about a
# millisecond per message: a 200-message chat paid 0.2 s of CPU per turn before a byte was
# sent, growing with every turn. hippobot builds these in wire form already, and the SDKs send
# ``extra_body`` unchanged (merged over the transformed body, same key order), so they travel
# there and the transform sees only an empty placeholder.
_BULKY = ("messages", "system", "tools")


def sent_as_is(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` for an SDK ``create`` call, with the bulky ones passed through untouched."""
    out = dict(params)
    extra = {key: out[key] for key in _BULKY if key in out}
    for key in extra:
        out[key] = []
    if extra:
        out["extra_body"] = extra
    return out


def http_client(sdk: ModuleType) -> Any:
    """The SDK's own default async HTTP client, built on the process's one TLS context.

    Each new HTTP client would otherwise read the system's certificate store again (about 50
    ms of CPU, even for a plain-http local server), and hippobot builds one per event loop
    and per agent. ``None`` (the SDK then builds its default) if this SDK has no such class.
    """
    factory = getattr(sdk, "DefaultAsyncHttpxClient", None)
    if factory is None:
        return None
    try:
        return factory(verify=_tls_context(factory))
    except Exception:  # an SDK whose client takes other arguments: its default it is
        return None


@functools.cache
def _tls_context(factory: type) -> ssl.SSLContext:
    """A context made exactly as the SDK's HTTP library makes its default one, once."""
    base = next(c for c in factory.__mro__ if c.__name__ == "AsyncClient")
    library = importlib.import_module(base.__module__.split(".")[0])
    context: ssl.SSLContext = library.create_ssl_context()
    return context
