"""What keeps web pages and stray clients from driving ``hippobot serve``.

A browser will send requests to 127.0.0.1 on behalf of any page it shows: a form POST, a
``text/plain`` fetch, or, after DNS rebinding, a same-origin request to a hostile name that
now resolves to loopback. :class:`WebGuard` is one ASGI middleware that checks, in order:

1. **Host.** Only ``localhost`` (and ``*.localhost``), IP literals, and names in
   ``serve.allowedHosts`` are served. DNS rebinding needs a *name* that resolves to this
   machine; an IP literal cannot be rebound. ``"*"`` accepts every name.
2. **Origin.** A request carrying an ``Origin`` must come from this server's own origin or
   one listed in ``serve.corsOrigins`` (``"*"``: any). Allowed cross-origin requests get CORS
   headers; their preflight (``OPTIONS``) is answered here, without a key.
3. **Body size.** A body over ``serve.maxBodyBytes`` is refused with a 413 before it is read
   (by ``Content-Length``) or as soon as it grows past the limit.
4. **Content type.** A POST must be ``application/json``. Forms and ``text/plain``, the
   requests a page may send without a preflight, never reach a route.
5. **Key.** Every path but ``/healthz`` and ``/login`` needs ``Authorization: Bearer <key>``
   (compared in constant time). The memory page at ``/`` also accepts a login cookie: it is
   set by ``POST /login`` (the page's form) or by opening ``/?token=<key>`` once, which then
   redirects to ``/`` so the key leaves the address bar. The cookie is ``HttpOnly`` and
   ``SameSite=Strict`` and holds an HMAC of the key, not the key, and it opens the page only,
   never the API: a stolen cookie cannot run a turn.

Every refusal is an OpenAI-shaped JSON error (the login page is HTML). The order matters: a
page that may not talk to the server learns nothing from it, not even whether a key is set.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hippobot.server.web import PAGE_HEADERS, render_login
from hippobot.server.wire import ApiError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "OPEN_PATHS",
    "WebGuard",
    "WebPolicy",
    "bearer_ok",
    "cookie_name",
    "cookie_value",
    "host_allowed",
    "normalize_origin",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
OPEN_PATHS = frozenset({"/healthz", "/login"})
PAGE_PATHS = frozenset({"/"})
LOGIN_PATH = "/login"
COOKIE_MAX_AGE = 30 * 24 * 3600
_COOKIE_LABEL = b"hippobot memory page login"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_EXPOSED = "X-Session-Id, X-Request-Id, Retry-After"
_LOGIN_FORM_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class WebPolicy:
    """Who may reach the server from a browser, and how big a request may be."""

    allowed_hosts: frozenset[str] = frozenset()
    """Host names served besides localhost and IP literals; ``"*"``: any."""
    cors_origins: frozenset[str] = frozenset()
    """Origins (``scheme://host[:port]``) whose pages may call the API; ``"*"``: any."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def of(
        cls,
        *,
        allowed_hosts: Iterable[str] = (),
        cors_origins: Iterable[str] = (),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> WebPolicy:
        return cls(
            frozenset(h.strip().lower().rstrip(".") for h in allowed_hosts if h.strip()),
            frozenset(normalize_origin(o) for o in cors_origins if o.strip()),
            max_body_bytes,
        )


# --- pure checks -----------------------------------------------------------------------------


def bearer_ok(authorization: str | None, api_key: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <key>`` header."""
    token = _bearer_token(authorization)
    return token is not None and hmac.compare_digest(token.encode(), api_key.encode())


def _bearer_token(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _split_host(host: str) -> str:
    """The name of a ``Host`` header value, without port or IPv6 brackets, lowercased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def host_allowed(host: str | None, allowed: Collection[str]) -> bool:
    """Whether a request naming ``host`` may be served (see the module docstring)."""
    if host is None:
        return True  # HTTP/1.0 without Host: no browser sends that
    name = _split_host(host)
    if "*" in allowed or name in allowed:
        return True
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def normalize_origin(origin: str) -> str:
    origin = origin.strip().lower().rstrip("/")
    for scheme, port in (("http://", ":80"), ("https://", ":443")):
        if origin.startswith(scheme) and origin.endswith(port):
            return origin[: -len(port)]
    return origin


def cookie_name(port: int | None) -> str:
    """Cookies are not isolated by port, so each port's server has a cookie of its own."""
    return f"hippobot_login_{port or 0}"


def cookie_value(key: str) -> str:
    return hmac.new(key.encode(), _COOKIE_LABEL, hashlib.sha256).hexdigest()


def _error(status: int, message: str, code: str, **headers: str) -> Response:
    return ApiError(status, message, code=code, headers=headers).response()


# --- the middleware --------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    scope: Scope
    headers: Headers = field(init=False)
    method: str = field(init=False)
    path: str = field(init=False)

    def __post_init__(self) -> None:
        self.headers = Headers(scope=self.scope)
        self.method = self.scope["method"].upper()
        self.path = self.scope["path"]

    @property
    def port(self) -> int | None:
        server = self.scope.get("server")
        return server[1] if server else None

    def own_origin(self) -> str | None:
        host = self.headers.get("host")
        return normalize_origin(f"{self.scope.get('scheme', 'http')}://{host}") if host else None

    def cookie(self, name: str) -> str | None:
        raw = self.headers.get("cookie")
        if not raw:
            return None
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(raw)
        except Exception:
            return None
        morsel = jar.get(name)
        return morsel.value if morsel is not None else None

    def query(self, name: str) -> str | None:
        values = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get(name)
        return values[0] if values else None


class WebGuard:
    """The checks of the module docstring, in front of the whole app.

    ``keys`` are the bearer tokens accepted (the owner's and those of ``serve.users``);
    empty means no key check (in-process tests only: ``hippobot serve`` always has a key,
    configured or generated per install). The key a request authenticated with is put in
    ``scope["state"]["api_key"]``; a page request that logged in by cookie reaches the app
    with that key as its ``Authorization`` header, so it sees the workspace of the person
    the key belongs to.
    """

    def __init__(self, app: ASGIApp, keys: Collection[str], policy: WebPolicy) -> None:
        self.app = app
        self.keys = tuple(k for k in keys if k)
        self.policy = policy
        self._cookies = {cookie_value(k): k for k in self.keys}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        req = _Request(scope)
        refusal, cors = self._refusal(req)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if cors is not None and req.method == "OPTIONS" and req.headers.get(
            "access-control-request-method"
        ):
            await self._preflight(req, cors)(scope, receive, send)
            return
        if cors is not None:
            send = _with_cors(send, cors)
        early = self._admission(req)
        if early is not None:
            await early(scope, receive, send)
            return
        if req.path == LOGIN_PATH or (req.path in PAGE_PATHS and req.query("token") is not None):
            await (await self._login(req, receive))(scope, receive, send)
            return
        key = self._authenticated(req)
        if self.keys and key is None and req.path not in OPEN_PATHS:
            await self._unauthorized(req)(scope, receive, send)
            return
        if key is not None:
            scope.setdefault("state", {})["api_key"] = key
            if not req.headers.get("authorization"):  # a login cookie stands for its key
                scope["headers"] = [
                    *scope["headers"], (b"authorization", f"Bearer {key}".encode("latin-1"))
                ]
        if req.method in _BODY_METHODS:
            body = await self._read_body(receive)
            if body is None:
                await self._too_large()(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    # -- checks that need no key --------------------------------------------------------

    def _refusal(self, req: _Request) -> tuple[Response | None, str | None]:
        """(a refusal, or None; the origin to answer with CORS headers, or None)."""
        host = req.headers.get("host")
        if not host_allowed(host, self.policy.allowed_hosts):
            log.warning("refused a request for Host %r (not in serve.allowedHosts)", host)
            return _error(
                403,
                f"this server does not answer to the host name {_split_host(host or '')!r}; "
                "add it to serve.allowedHosts in config.json if you reach hippobot by that name",
                "host_not_allowed",
            ), None
        origin = req.headers.get("origin")
        if origin is None:
            return None, None
        wanted = normalize_origin(origin)
        if wanted == req.own_origin():
            return None, None
        if "*" in self.policy.cors_origins or wanted in self.policy.cors_origins:
            return None, origin
        log.warning("refused a request from the web page origin %r", origin)
        return _error(
            403,
            f"requests from web pages at {origin!r} are not allowed; list the origin in "
            "serve.corsOrigins in config.json to let that page use hippobot",
            "origin_not_allowed",
        ), None

    def _preflight(self, req: _Request, origin: str) -> Response:
        headers = {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": req.headers.get(
                "access-control-request-headers", "Authorization, Content-Type"
            ),
            "Access-Control-Max-Age": "600",
            "Vary": "Origin",
        }
        if req.headers.get("access-control-request-private-network") == "true":
            headers["Access-Control-Allow-Private-Network"] = "true"
        return Response(status_code=204, headers=headers)

    def _admission(self, req: _Request) -> Response | None:
        if req.method not in _BODY_METHODS:
            return None
        length = req.headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.policy.max_body_bytes:
            return self._too_large()
        kind = req.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        wanted = "application/x-www-form-urlencoded" if req.path == LOGIN_PATH else "application/json"
        if kind != wanted:
            return ApiError(
                415,
                f"the request body must be sent with 'Content-Type: {wanted}' "
                f"(got {kind or 'none'!r}; with curl, add -H 'Content-Type: {wanted}')",
                code="unsupported_media_type",
            ).response()
        return None

    def _too_large(self) -> Response:
        limit = self.policy.max_body_bytes
        return ApiError(
            413,
            f"the request body is larger than the server's limit of {limit} bytes "
            "(serve.maxBodyBytes); send a shorter message",
            code="request_too_large",
        ).response()

    # -- keys and the login cookie ------------------------------------------------------

    def _key_for(self, token: str | None) -> str | None:
        if token is None:
            return None
        found = None
        for key in self.keys:  # no early exit: every key is compared
            if hmac.compare_digest(token.encode(), key.encode()):
                found = key
        return found

    def _authenticated(self, req: _Request) -> str | None:
        if req.path in OPEN_PATHS:
            return None
        key = self._key_for(_bearer_token(req.headers.get("authorization")))
        if key is not None or req.path not in PAGE_PATHS:
            return key
        cookie = req.cookie(cookie_name(req.port))
        if cookie is None:
            return None
        found = None
        for value, k in self._cookies.items():
            if hmac.compare_digest(cookie.encode(), value.encode()):
                found = k
        return found

    def _unauthorized(self, req: _Request) -> Response:
        if req.path in PAGE_PATHS and req.method in ("GET", "HEAD"):
            return HTMLResponse(render_login(), status_code=401, headers=PAGE_HEADERS)
        return ApiError(
            401,
            "missing or wrong API key: send 'Authorization: Bearer <key>' with the key "
            "configured as serve.apiKey or HIPPOBOT_SERVE_KEY on the server, or your own from "
            "serve.users (without a configured key: the token 'hippobot serve' printed at "
            "start-up, kept in <home>/serve-token)",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        ).response()

    async def _login(self, req: _Request, receive: Receive) -> Response:
        if req.path == LOGIN_PATH:
            if req.method != "POST":
                return RedirectResponse("/", status_code=303)
            body = await self._read_body(receive, limit=_LOGIN_FORM_LIMIT)
            form = parse_qs((body or b"").decode("utf-8", "replace"))
            token = (form.get("token") or [""])[0].strip()
        else:
            token = (req.query("token") or "").strip()
        key = self._key_for(token) if self.keys else ""
        if key is None:
            return HTMLResponse(
                render_login("That token is not right. Use the one hippobot serve printed."),
                status_code=401,
                headers=PAGE_HEADERS,
            )
        response = RedirectResponse("/", status_code=303, headers=_NO_STORE)
        if key:
            response.set_cookie(
                cookie_name(req.port),
                cookie_value(key),
                max_age=COOKIE_MAX_AGE,
                path="/",
                httponly=True,
                samesite="strict",
                secure=req.scope.get("scheme") == "https",
            )
        return response

    async def _read_body(self, receive: Receive, limit: int | None = None) -> bytes | None:
        """The whole body, or None once it grows past the limit."""
        limit = self.policy.max_body_bytes if limit is None else limit
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the route sees an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


_NO_STORE = {"Cache-Control": "no-store"}


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the already-read body, then waits for disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _with_cors(send: Send, origin: str) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            headers["Access-Control-Allow-Origin"] = origin
            headers["Access-Control-Expose-Headers"] = _EXPOSED
            headers.add_vary_header("Origin")
        await send(message)

    return wrapped

