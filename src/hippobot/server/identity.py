"""Which conversation a chat-completions request continues, and whether it is a retry.

Session identity, first match wins:

1. the ``X-Session-Id`` header (what hippobot echoes back, ``api:<id>``, is accepted as is);
2. ``session_id`` in the body (nanobot's own API field);
3. the ``X-OpenWebUI-Chat-Id`` header (Open WebUI with ``ENABLE_FORWARD_USER_INFO_HEADERS``);
4. the ``user`` field;
5. else one shared session, ``api:default``.

A retry is recognised by what clients send: an ``Idempotency-Key`` header, or the official
SDKs' ``x-stainless-retry-count`` (``0`` on a first attempt). Client *task* prompts (Open
WebUI's title, tags, follow-up and autocomplete requests, which start with ``### Task:``, or
any request with ``X-Hippobot-Stateless: true``) belong to no session at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hippobot.errors import UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.session.keys import validate_key

__all__ = [
    "CHANNEL",
    "DEFAULT_SESSION",
    "STATELESS_HEADER",
    "Attempt",
    "RequestId",
    "is_task_prompt",
    "session_key",
]

CHANNEL = "api"
DEFAULT_SESSION = "default"
STATELESS_HEADER = "x-hippobot-stateless"
TASK_PREFIX = "### Task:"

_SOURCES = (
    ("header", "x-session-id", "X-Session-Id header"),
    ("body", "session_id", "'session_id' field"),
    ("header", "x-openwebui-chat-id", "X-OpenWebUI-Chat-Id header"),
    ("body", "user", "'user' field"),
)


class IdentityError(ValueError):
    """A session id that cannot be used; ``param`` names where it came from."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """``api:<id>`` from the first source that is present (see the module docstring)."""
    for where, name, label in _SOURCES:
        raw = headers.get(name) if where == "header" else body.get(name)
        if raw is None:
            continue
        param = name if where == "body" else "messages"
        if not isinstance(raw, str) or not raw.strip():
            raise IdentityError(f"the {label} must be a non-empty string", param)
        chat = raw.strip()
        if chat.startswith(f"{CHANNEL}:"):  # the echoed X-Session-Id sent back as is
            chat = chat[len(CHANNEL) + 1 :]
        if not chat:
            raise IdentityError(f"the {label} names no session", param)
        try:
            return validate_key(f"{CHANNEL}:{chat}")
        except UserError as exc:
            raise IdentityError(f"the {label} cannot name a session: {exc}", param) from None
    return f"{CHANNEL}:{DEFAULT_SESSION}"


def is_task_prompt(text: str, headers: Mapping[str, str]) -> bool:
    """True for a client's background task (answered without a session, see module doc)."""
    flag = headers.get(STATELESS_HEADER, "").strip().lower()
    if flag in ("1", "true", "yes"):
        return True
    return text.lstrip().startswith(TASK_PREFIX)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a request says about being a retry of an earlier one."""

    idempotency_key: str | None = None
    retry_count: int | None = None  # None: the client does not say

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> Attempt:
        key = (headers.get("idempotency-key") or "").strip() or None
        raw = headers.get("x-stainless-retry-count")
        count: int | None = None
        if raw is not None:
            try:
                count = max(0, int(raw.strip()))
            except ValueError:
                count = None
        return cls(key, count)


# --- request ids ----------------------------------------------------------------------------

_REQUEST_ID = lazy_compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestId:
    """ASGI middleware: every response carries ``x-request-id``.

    The client's own ``X-Request-Id`` is echoed when it is a plain token, else a new one
    (``req_<hex>``) is made; it is also in ``scope["state"]["request_id"]`` for logging.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("x-request-id", "")
        rid = given if _REQUEST_ID.fullmatch(given) else f"req_{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = rid

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = rid
            await send(message)

        await self.app(scope, receive, tagged)
