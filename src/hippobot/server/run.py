"""Run ``hippobot serve``: choose the address, bind it, serve until SIGTERM/SIGINT.

Binding rule: without an API key (``serve.apiKey`` or ``HIPPOBOT_SERVE_KEY``) the server
only ever listens on loopback; asking for another address is refused with a warning and
127.0.0.1 is used instead. The socket is bound here, before uvicorn starts, so that port 0
works and the printed address is the real one.

Shutdown: on SIGTERM/SIGINT the server stops accepting connections and gives in-flight turns
``shutdown_timeout`` seconds to finish; turns still running then are cancelled (their user
messages are already saved), and the lifespan stops the schedulers and drains the agent's
background jobs.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import TYPE_CHECKING, TextIO

import uvicorn

from hippobot.errors import UserError
from hippobot.server.app import create_app

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from hippobot.config import Settings

__all__ = ["GracefulServer", "bind_socket", "is_loopback", "resolve_bind", "run_server", "serve_key"]

LOOPBACK = "127.0.0.1"
BACKLOG = 2048


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_key(settings: Settings) -> str | None:
    """The bearer token clients must send: ``serve.apiKey``, else ``HIPPOBOT_SERVE_KEY``."""
    return settings.config.serve.api_key or settings.env.get("HIPPOBOT_SERVE_KEY") or None


def resolve_bind(host: str, api_key: str | None) -> tuple[str, str | None]:
    """(address to bind, warning for the operator or None)."""
    if api_key or is_loopback(host):
        return host, None
    return LOOPBACK, (
        f"no API key is configured (serve.apiKey or HIPPOBOT_SERVE_KEY), so hippobot will not "
        f"listen on {host}; binding {LOOPBACK} instead"
    )


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; a clear :class:`UserError` if refused."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise UserError(f"cannot bind {host}:{port}: unknown address ({exc})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # connections made before uvicorn is up wait instead of failing
    except OSError as exc:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (use --port to pick another)"
        ) from None
    sock.set_inheritable(True)
    return sock


class GracefulServer(uvicorn.Server):
    """uvicorn, plus: the app's in-flight turns learn about shutdown the moment it starts.

    uvicorn waits for open requests before it runs the lifespan shutdown; telling the
    :class:`~hippobot.server.app.TurnGate` first bounds that wait by ``shutdown_timeout``
    (abandoned turns answer 503 and their connections close).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        app: Starlette,
        shutdown_timeout: float,
        *,
        out: TextIO | None = None,
    ) -> None:
        super().__init__(config)
        self._gate = app.state.gate
        self._shutdown_timeout = shutdown_timeout
        self._out = out

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._out is not None:
            self._out.write(f"hippobot serve: shutting down ({len(self._gate)} turn(s) in flight)\n")
            self._out.flush()
        self._gate.begin_close(self._shutdown_timeout)
        await super().shutdown(sockets)
        if self._out is not None:  # before uvicorn re-raises the signal that stopped it
            self._out.write("hippobot serve: stopped\n")
            self._out.flush()


def run_server(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    shutdown_timeout: float = 30.0,
    out: TextIO | None = None,
) -> None:
    """Serve until interrupted. ``host``/``port`` None: ``serve.host``/``serve.port``."""
    from hippobot.agent.agent import Agent

    err = out or sys.stderr
    api_key = serve_key(settings)
    user_keys = [u.api_key for u in settings.config.serve.users.values() if u.api_key]
    bind_host, warning = resolve_bind(host or settings.config.serve.host, api_key or
                                      (user_keys[0] if user_keys else None))
    if warning:
        err.write(f"hippobot serve: warning: {warning}\n")
    sock = bind_socket(bind_host, settings.config.serve.port if port is None else port)
    actual_port = sock.getsockname()[1]
    app = create_app(Agent(settings), api_key=api_key, shutdown_timeout=shutdown_timeout)
    shown = f"[{bind_host}]" if ":" in bind_host else bind_host
    auth = "bearer token required" if api_key or user_keys else (
        "no API key configured: loopback only, no auth")
    if settings.config.serve.users:
        auth += f"; {len(settings.config.serve.users)} user(s) with workspaces of their own"
    err.write(
        f"hippobot serve: listening on http://{shown}:{actual_port}/v1 "
        f"(workspace {settings.workspace}; {auth})\n"
    )
    err.flush()
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        backlog=BACKLOG,
        timeout_graceful_shutdown=int(shutdown_timeout) + 5,
    )
    GracefulServer(config, app, shutdown_timeout, out=err).run(sockets=[sock])
