"""Bounds on connections, so clients that connect and stall cannot wedge ``hippobot serve``.

uvicorn's HTTP/1.1 protocol waits forever for a request's headers, and accepts as many
connections as the process has file descriptors. A few hundred sockets that send
``GET / HTTP/1.1\\r\\nHost: x\\r\\n`` and nothing more used to exhaust the descriptors: the
server could no longer accept, open a session file or call the model.

:func:`guarded_protocol` returns uvicorn's h11 protocol with two limits:

* **Connections.** Beyond ``max_connections`` open at once, a new connection is answered
  ``503`` and closed at once, so descriptors stay free for files and model calls. The limit
  is also kept well below the process's descriptor limit (:func:`connection_limit`).
* **Header time.** A connection must complete a request's headers within ``header_timeout``
  seconds of connecting, and again after each response (a kept-alive connection that starts
  a request and stalls is closed too).
* **Body time.** Once the headers are in, the whole body must arrive within
  ``body_timeout`` seconds, else the client gets a ``408`` and the connection is closed: a
  ``Content-Length: 1000000`` sent one byte every few seconds cannot hold a connection.
  Long turns and streamed replies are not affected: both clocks run only while the server
  waits for the client.
* **The slowest go first.** When every connection is taken, a new one does not get a
  ``503`` while some other connection is still sending its request: the one that has been
  at it longest is closed (a ``408`` if its headers were in) and the newcomer is served.
  Slow clients therefore cannot lock out fast ones (``/healthz``, a turn) even for the
  seconds the clocks allow; only when every connection holds a complete request (turns
  running) is the newcomer refused.

Shutdown needs nothing extra: uvicorn closes connections that have no request in progress.

uvicorn has no public hook for any of this: ``timeout_keep_alive`` runs only between
requests (and any byte resets it), ``limit_concurrency`` answers ``503`` only once a
request's headers are in, and an ASGI middleware sees nothing before that. So the guard
subclasses uvicorn's ``H11Protocol``, whose internals are not an API: ``pyproject.toml``
pins uvicorn to the releases ``tests/server/test_uvicorn_contract.py`` checked, and
:func:`guarded_protocol` refuses to start on one without the methods it overrides.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from hippobot.errors import HippobotError

__all__ = ["connection_limit", "guarded_protocol", "raise_fd_limit"]

log = logging.getLogger(__name__)

_WARN_EVERY = 10.0  # seconds between "refused a connection" warnings
_last_warning = [0.0]

_BUSY_BODY = (
    b'{"error": {"message": "too many open connections; try again", '
    b'"type": "server_error", "param": null, "code": "server_busy"}}'
)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
_SLOW_BODY = (
    b'{"error": {"message": "the request was sent too slowly (serve.bodyTimeout) while other '
    b'clients waited; send it again, faster", "type": "invalid_request_error", "param": null, '
    b'"code": "request_timeout"}}'
)
_SLOW = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_SLOW_BODY), _SLOW_BODY)
)


def raise_fd_limit() -> None:
    """Lift the soft descriptor limit to the hard one (many systems start at 1,024)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        pass


def connection_limit(wanted: int) -> int:
    """``wanted``, lowered so connections use at most about half the free descriptors
    (each turn also needs a connection to the model and a few files)."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return wanted
    return max(8, min(wanted, (soft - 64) // 2))


# What GuardedH11Protocol overrides; a release that renames one would silently drop a limit.
OVERRIDDEN = ("connection_made", "connection_lost", "data_received", "handle_events",
              "on_response_complete")
# What it reads: on the protocol (conn, an h11.Connection; connections, the server's open
# ones; transport; loop; cycle) and on a request cycle (response_started).
PROTOCOL_ATTRIBUTES = ("conn", "connections", "transport", "loop", "cycle")


def check_uvicorn() -> None:
    """A HippobotError when the installed uvicorn lacks a method the guard overrides."""
    missing = [name for name in OVERRIDDEN if not callable(getattr(H11Protocol, name, None))]
    if missing:
        raise HippobotError(
            f"uvicorn {uvicorn.__version__} has no H11Protocol.{', H11Protocol.'.join(missing)}, "
            f"which hippobot serve's connection limits extend: pip install '{_pinned_uvicorn()}'"
        )


def _pinned_uvicorn() -> str:
    """The uvicorn requirement hippobot was installed with (pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        wanted = [r for r in requires("hippobot") or [] if r.replace(" ", "").startswith("uvicorn")]
    except PackageNotFoundError:
        wanted = []
    return wanted[0].replace(" ", "") if wanted else "uvicorn"


def guarded_protocol(
    max_connections: int, header_timeout: float, body_timeout: float = 30.0
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the module docstring's limits (pass as ``http=``)."""
    check_uvicorn()

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _refused = False
        # When this connection started waiting for the request it is still sending (None:
        # no request pending, e.g. a turn is running): the eviction order.
        _waiting_since: float | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if self._open_elsewhere() >= max_connections and not self._evict_stalest():
                self._refused = True
                now = time.monotonic()
                if now - _last_warning[0] >= _WARN_EVERY:
                    _last_warning[0] = now
                    log.warning(
                        "refusing connections: %d open, the limit is %d (serve.maxConnections)",
                        len(self.connections) - 1,
                        max_connections,
                    )
                transport.write(_BUSY)
                transport.close()
                return
            self._wait_for_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_header_timer()
            self._stop_body_timer()
            self._waiting_since = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            state = self.conn.their_state
            if state is h11.IDLE or self.transport.is_closing():
                return
            self._stop_header_timer()  # the headers are in
            if state is h11.SEND_BODY:
                if self._body_timer is None:
                    self._body_timer = self.loop.call_later(body_timeout, self._too_slow)
            else:  # the whole request is in: nothing more to wait for
                self._stop_body_timer()
                self._waiting_since = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._wait_for_headers()

        def _wait_for_headers(self) -> None:
            self._stop_header_timer()
            self._waiting_since = time.monotonic()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def _stop_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _too_slow(self) -> None:
            """The body did not arrive in time (or this connection is the stalest): 408."""
            self._body_timer = None
            self._stop_header_timer()
            self._waiting_since = None
            if self.transport.is_closing():
                return
            cycle = getattr(self, "cycle", None)
            if self.conn.their_state is h11.SEND_BODY and not (cycle and cycle.response_started):
                self.transport.write(_SLOW)
            self.transport.close()

        def _open_elsewhere(self) -> int:
            return sum(1 for c in self.connections if c is not self and not c.transport.is_closing())

        def _evict_stalest(self) -> bool:
            """Close the connection that has waited longest for its request; False if none
            is waiting (every other connection holds a complete request)."""
            waiting = [
                c for c in self.connections
                if isinstance(c, GuardedH11Protocol) and c is not self
                and c._waiting_since is not None and not c.transport.is_closing()
            ]
            if not waiting:
                return False
            min(waiting, key=lambda c: c._waiting_since or 0.0)._too_slow()
            return True

    return GuardedH11Protocol
