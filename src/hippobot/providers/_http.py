"""The one place a provider request is sent, streamed, timed and turned into typed errors.

Both adapters speak their wire protocol over :func:`open_stream`: it POSTs a JSON body,
maps every transport failure and error status to a :mod:`hippobot.errors` exception (through
:mod:`hippobot.providers._errors`), and hands the adapter the server-sent events of a good
response. Nothing here knows a vendor's format.

* **One HTTP client per process** (per event loop: connections belong to the loop that opened
  them, and one more for plain-``http`` endpoints, which never pay for loading the
  certificate store), shared by every provider, made on the first request; the TLS one uses
  the process's one TLS context. They are closed when the last provider using them is.
* **Timeouts count from the last byte:** ``timeout`` bounds sending and each wait for the
  next piece of the response (the status line, each chunk, each keep-alive comment), not the
  whole reply, so a slow model that keeps streaming, or a server that keeps the connection
  alive while it reads a long prompt, is never cut off; connecting takes at most
  :data:`CONNECT_TIMEOUT_S` of it.
* **Errors say whether the server may still be working** (``ProviderError.in_flight``): a
  connection that failed or an error status means it is not; a timeout after the request was
  sent, or a stream cut part-way, means it may be (the retry policy never re-sends those to
  an endpoint that works on one request at a time).
* **A cancelled or abandoned request closes its connection** (httpx does not put a
  connection whose response was not read to the end back in the pool), so the next request
  can never read a stale answer.

Importing this module imports no HTTP library: ``httpx`` is loaded on the first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import sys
import types
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hippobot import __version__
from hippobot.errors import ProviderError
from hippobot.providers import _errors

if TYPE_CHECKING:
    import httpx

__all__ = ["SSE", "decode", "open_stream", "release", "tls_context"]

USER_AGENT = f"hippobot/{__version__}"
#: Longest wait for a connection: a server that is up accepts at once, whatever its load.
CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SSE:
    """One server-sent event: its ``event:`` name ("" when none) and its ``data:`` text."""

    event: str
    data: str


# --- the shared client ----------------------------------------------------------------


def _import_httpx() -> types.ModuleType:
    """``httpx``, without the parts a client never uses.

    ``import httpx`` also imports its command-line tool (click, rich, pygments) whenever those
    are installed, and httpcore imports trio and h2 when they are; a provider needs none of
    them (asyncio, HTTP/1.1), and together they cost ~150 ms and ~10 MB at every start. They
    are hidden only while httpx loads, and only if nothing imported them already.
    """
    if "httpx" in sys.modules:
        return sys.modules["httpx"]
    hidden = [name for name in ("trio", "h2") if name not in sys.modules and "httpcore" not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # makes "import name" fail
    cli_stub = "httpx._main" not in sys.modules
    if cli_stub:
        stub = types.ModuleType("httpx._main")
        stub.main = _no_cli  # type: ignore[attr-defined]
        sys.modules["httpx._main"] = stub
    try:
        import httpcore  # noqa: F401  (httpx imports it at its first client: here, trio hidden)
        import httpx
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
        if cli_stub:
            sys.modules.pop("httpx._main", None)
    return httpx


def _no_cli() -> None:
    raise SystemExit("the httpx command line is not loaded in this process")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context (system CA bundle through certifi, as httpx makes it);
    building one reads the certificate store, ~50 ms of CPU, so it is made once."""
    httpx = _import_httpx()
    context: ssl.SSLContext = httpx.create_ssl_context()
    return context


@functools.cache
def _plain_context() -> ssl.SSLContext:
    """For the client that only ever sends ``http://`` requests: verifying, and trusting no
    certificate at all, so it can never carry a TLS connection by mistake; it spares a local
    endpoint's every start the ~50 ms of reading the certificate store."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class _SharedClient:
    """The process's HTTP clients for the running event loop (one for ``https://``
    endpoints, one for plain ``http://`` ones), and who is using them."""

    def __init__(self) -> None:
        self._clients: dict[bool, httpx.AsyncClient] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users: set[int] = set()

    def get(self, user: object, *, tls: bool) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._clients, self._loop, self._users = {}, loop, set()
        client = self._clients.get(tls)
        if client is None or client.is_closed:
            httpx = _import_httpx()
            # Connection-level limits only: timeouts are per request, retries are the retry
            # policy's, and redirects are never followed (a POST must not be replayed elsewhere).
            client = httpx.AsyncClient(
                verify=tls_context() if tls else _plain_context(), timeout=None,
                follow_redirects=False,
                limits=httpx.Limits(max_keepalive_connections=8, keepalive_expiry=30.0),
            )
            self._clients[tls] = client
        self._users.add(id(user))
        return client

    async def release(self, user: object) -> None:
        """``user`` is done; the clients are closed when nobody on this loop uses them."""
        self._users.discard(id(user))
        if self._users:
            return
        clients, self._clients, self._loop = list(self._clients.values()), {}, None
        for client in clients:
            with contextlib.suppress(Exception):  # closing idle connections must not fail
                await client.aclose()


_shared = _SharedClient()


async def release(user: object) -> None:
    await _shared.release(user)


# --- one request ----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_stream(
    ep: _errors.Endpoint, path: str, body: Mapping[str, Any], *,
    headers: Mapping[str, str], user: object,
) -> AsyncIterator[AsyncIterator[SSE]]:
    """POST ``body`` as JSON to ``ep.api_base + path`` (with ``headers``) and yield its
    server-sent events; ``user`` (the provider) keeps the shared client open until released.

    Raises the typed error for a failed connection, a timeout and an error status (its
    body and ``Retry-After`` read); while the events are read, a cut connection raises
    ``StreamInterruptedError`` and a stall longer than the timeout ``ProviderTimeoutError``.
    """
    httpx = _import_httpx()
    client = _shared.get(user, tls=ep.api_base.startswith("https:"))
    sent = {"content-type": "application/json", "accept": "text/event-stream",
            "user-agent": USER_AGENT, **headers}
    content = json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = client.build_request("POST", ep.api_base + path, content=content, headers=sent,
                                   timeout=httpx.Timeout(
                                       ep.timeout, connect=min(ep.timeout, CONNECT_TIMEOUT_S)))
    try:
        response = await client.send(request, stream=True)
    except Exception as exc:
        raise _transport(ep, exc, streaming=False) from exc
    try:
        if response.status_code >= 400:
            raise await _status_error(ep, response)
        yield _events(ep, response)
    finally:
        with contextlib.suppress(Exception):  # a broken connection may fail to close again
            await response.aclose()


async def _status_error(ep: _errors.Endpoint, response: httpx.Response) -> ProviderError:
    try:
        raw = await response.aread()
    except Exception:  # the body did not arrive: the status says enough
        raw = b""
    text = raw.decode("utf-8", "replace")
    body: object
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = text
    return _errors.from_status(ep, response.status_code, headers=response.headers, body=body)


def _transport(ep: _errors.Endpoint, exc: BaseException, *, streaming: bool) -> ProviderError:
    if isinstance(exc, ProviderError):
        return exc
    mapped = _errors.transport_error(ep, exc, streaming=streaming)
    if mapped is not None:
        return mapped
    return _errors.malformed(ep, f"not understood ({type(exc).__name__}: {exc})")


async def _events(ep: _errors.Endpoint, response: httpx.Response) -> AsyncIterator[SSE]:
    """The response body as server-sent events (``event:``/``data:`` fields, blank line ends
    an event, ``:`` comments skipped), transport failures typed as they happen."""
    event, data = "", list[str]()
    try:
        async for line in response.aiter_lines():
            if not line:
                if data:
                    yield SSE(event, "\n".join(data))
                event, data = "", list[str]()
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                data.append(value)
            elif field == "event":
                event = value
    except ProviderError:
        raise
    except Exception as exc:
        raise _transport(ep, exc, streaming=True) from exc
    if data:  # a last event without its blank line
        yield SSE(event, "\n".join(data))


def decode(ep: _errors.Endpoint, data: str) -> Any:
    """One event's JSON payload; a payload that is not JSON is a malformed response."""
    try:
        return json.loads(data)
    except ValueError:
        raise _errors.malformed(ep) from None
