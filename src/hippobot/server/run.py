"""Run ``hippobot serve``: choose the address, bind it, serve until SIGTERM/SIGINT.

Binding rule: without an API key (``serve.apiKey`` or ``HIPPOBOT_SERVE_KEY``) the server
only ever listens on loopback; asking for another address is refused with a warning and
127.0.0.1 is used instead. The socket is bound here, before uvicorn starts, so that port 0
works and the printed address is the real one.

Keys: clients always need one. It is ``serve.apiKey`` or ``HIPPOBOT_SERVE_KEY`` when set;
otherwise a random token generated once per install and kept in ``<home>/serve-token``
(mode 0600), printed at start-up with the memory page's login URL, as Jupyter does. A
loopback address is not authentication: any web page and any local user can reach it.

Connections: at most ``serve.maxConnections`` at once, each given ``serve.headerTimeout``
seconds to send its headers and ``serve.bodyTimeout`` for its body, the slowest dropped first
when all are taken (``connections.py``), so stalled clients cannot take every file descriptor
or lock out the others.

Shutdown: on SIGTERM/SIGINT the server stops accepting connections and gives in-flight turns
``shutdown_timeout`` seconds to finish; turns still running then are cancelled (their user
messages are already saved), and the lifespan stops the schedulers and drains the agent's
background jobs.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import uvicorn

from hippobot.atomic import atomic_write_text
from hippobot.errors import StorageError, UserError
from hippobot.server.app import create_app
from hippobot.server.connections import connection_limit, guarded_protocol, raise_fd_limit
from hippobot.server.security import WebPolicy
from hippobot.workspace import SERVE_TOKEN, Home

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from hippobot.config import Settings

__all__ = [
    "TOKEN_FILE",
    "GracefulServer",
    "bind_socket",
    "install_token",
    "is_loopback",
    "resolve_bind",
    "run_server",
    "serve_key",
    "web_policy",
]

LOOPBACK = "127.0.0.1"
BACKLOG = 2048
TOKEN_FILE = SERVE_TOKEN


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


def install_token(home: Path) -> str:
    """This install's serve token: read from ``<home>/serve-token``, created (mode 0600) the
    first time. A file others can read is tightened to 0600; an unusable one is replaced."""
    path = Home(home).serve_token
    try:
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_size < 1024:
            if info.st_mode & 0o077:
                path.chmod(0o600)
            token = path.read_text(encoding="utf-8").strip()
            if len(token) >= 32 and token.isascii() and token.isprintable() and " " not in token:
                return token
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    token = secrets.token_urlsafe(32)
    try:  # private from its first byte; a link at the path is replaced, never followed
        atomic_write_text(path, token + "\n", mode=0o600)
    except StorageError as exc:
        cause = exc.__cause__
        why = getattr(cause, "strerror", None) or cause or exc
        raise UserError(f"cannot write the serve token to {path}: {why}") from None
    return token


def web_policy(settings: Settings, bind_host: str) -> WebPolicy:
    """Hosts, origins and body limit from ``serve.*``; a host name given to ``--host`` is
    one the server answers to."""
    serve = settings.config.serve
    hosts = list(serve.allowed_hosts)
    try:
        ipaddress.ip_address(bind_host.strip("[]"))
    except ValueError:
        hosts.append(bind_host)
    return WebPolicy.of(
        allowed_hosts=hosts, cors_origins=serve.cors_origins, max_body_bytes=serve.max_body_bytes
    )


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
    serve = settings.config.serve
    configured = serve_key(settings)
    user_keys = [u.api_key for u in serve.users.values() if u.api_key]
    bind_host, warning = resolve_bind(
        host or serve.host, configured or (user_keys[0] if user_keys else None)
    )
    if warning:
        err.write(f"hippobot serve: warning: {warning}\n")
    key = configured or install_token(settings.home)
    sock = bind_socket(bind_host, serve.port if port is None else port)
    actual_port = sock.getsockname()[1]
    app = create_app(
        Agent(settings),
        api_key=key,
        shutdown_timeout=shutdown_timeout,
        policy=web_policy(settings, bind_host),
    )
    shown = f"[{bind_host}]" if ":" in bind_host else bind_host
    page = f"http://{'127.0.0.1' if bind_host in ('0.0.0.0', '::') else shown}:{actual_port}/"
    if configured:
        auth = "clients send the key of serve.apiKey / HIPPOBOT_SERVE_KEY as a bearer token"
        login = f"{page} (log in with that key)"
    else:
        auth = f"clients send the token in {Home(settings.home).serve_token} as a bearer token"
        login = f"{page}?token={key}"
    if serve.users:
        auth += f"; {len(serve.users)} user(s) with workspaces of their own, each with their key"
    err.write(
        f"hippobot serve: listening on http://{shown}:{actual_port}/v1 "
        f"(workspace {settings.workspace}; {auth})\n"
        f"hippobot serve: memory page: {login}\n"
    )
    err.flush()
    raise_fd_limit()
    limit = connection_limit(serve.max_connections)
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        # asyncio accepts up to `backlog` connections per loop turn, and a refused one holds
        # its descriptor for a few turns: a small backlog keeps that burst well under `limit`.
        backlog=max(8, limit // 4),
        http=guarded_protocol(limit, serve.header_timeout, serve.body_timeout),
        timeout_graceful_shutdown=int(shutdown_timeout) + 5,
    )
    GracefulServer(config, app, shutdown_timeout, out=err).run(sockets=[sock])
