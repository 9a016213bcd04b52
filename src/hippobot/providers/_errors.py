"""Turning what an endpoint did into one :mod:`hippobot.errors` exception.

Both vendor adapters call these helpers, so an HTTP status means the same thing whichever
SDK reported it. Every message is one line: what happened, then what the user can do.
The retry policy never reads these messages; it reads the exception type and fields.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from hippobot.errors import (
    AuthError,
    BadRequestError,
    ContextTooLongError,
    EndpointUnreachableError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
)
from hippobot.lazy_regex import lazy_compile
from hippobot.redact import redact_secrets

__all__ = [
    "Endpoint",
    "error_fields",
    "from_status",
    "interrupted",
    "malformed",
    "parse_retry_after",
    "timed_out",
    "transport_error",
    "unreachable",
]

# Structured codes/types vendors use for "prompt exceeds the context window".
_CONTEXT_CODES = frozenset(
    {
        "context_length_exceeded",
        "context_window_exceeded",
        "prompt_too_long",
        "request_too_large_for_model",
    }
)
# Last resort for servers (vLLM, llama.cpp, Anthropic) that only say it in prose.
_CONTEXT_PROSE = lazy_compile(
    r"context (length|window)|maximum context|prompt is too long|too many (input )?tokens"
    r"|exceeds? the (available )?context",
    re.IGNORECASE,
)
_DETAIL_MAX = 200


class Endpoint:
    """Who we were talking to, for messages: provider name (config key) and base URL."""

    __slots__ = ("api_base", "kind", "name", "timeout")

    def __init__(self, *, name: str, api_base: str, timeout: float, kind: str) -> None:
        self.name = name
        self.api_base = api_base
        self.timeout = timeout
        self.kind = kind  # "openai" | "anthropic": which API shape to name in hints

    def make(self, cls: type[ProviderError], message: str, **fields: Any) -> ProviderError:
        # Error bodies may echo the rejected key; messages end up on screens and in logs.
        return cls(redact_secrets(message), provider=self.name, **fields)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 1] + "…"


def error_fields(body: object) -> tuple[str, str, str]:
    """(message, code, type) of a vendor error body, each "" when absent.

    Accepts OpenAI ``{"error": {...}}`` (or the inner object the OpenAI SDK keeps),
    Anthropic ``{"type": "error", "error": {...}}`` and bare ``{"error": "text"}``.
    """
    if not isinstance(body, Mapping):
        return (_one_line(body) if isinstance(body, str) else "", "", "")
    inner: Any = body.get("error", body)
    if isinstance(inner, str):
        return _one_line(inner), "", ""
    if not isinstance(inner, Mapping):
        return "", "", ""
    message = inner.get("message")
    code = inner.get("code")
    details = inner.get("details")
    if not code and isinstance(details, Mapping):
        code = details.get("error_code")
    kind = inner.get("type")
    return (
        _one_line(message) if isinstance(message, str) else "",
        str(code) if code is not None else "",
        str(kind) if kind is not None else "",
    )


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    value = headers.get(name)
    if value is None:
        lowered = {k.lower(): v for k, v in headers.items()}
        value = lowered.get(name)
    return value


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``Retry-After`` (seconds or HTTP date)."""
    raw_ms = _header(headers, "retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _is_context_too_long(message: str, code: str, kind: str) -> bool:
    if code in _CONTEXT_CODES or kind in _CONTEXT_CODES:
        return True
    return bool(_CONTEXT_PROSE.search(message))


_AUTH_KINDS = frozenset({"authentication_error", "permission_error", "invalid_api_key"})
_RATE_KINDS = frozenset({"rate_limit_error", "rate_limit_exceeded"})
_CLIENT_KINDS = frozenset({"invalid_request_error", "not_found_error", "request_too_large"})


def _effective_status(status: int | None, code: str, kind: str) -> int:
    """An error event inside a 200 stream has no status of its own: infer one."""
    if status is not None and status >= 400:
        return status
    if kind in _AUTH_KINDS or code in _AUTH_KINDS:
        return 401
    if kind in _RATE_KINDS or code in _RATE_KINDS:
        return 429
    if kind in _CLIENT_KINDS or code in _CONTEXT_CODES:
        return 400
    return 500


def from_status(
    ep: Endpoint, status: int | None, *, headers: Mapping[str, str] | None, body: object
) -> ProviderError:
    """The typed error for an HTTP error status, or for an error event inside a stream
    (``status`` None: the type is inferred from the body's structured fields)."""
    message, code, kind = error_fields(body)
    status = _effective_status(status, code, kind)
    detail = f"{status}: {message}" if message else str(status)
    retry_after = parse_retry_after(headers)
    fields: dict[str, Any] = {"status": status, "retry_after": retry_after}
    key = f"providers.{ep.name}"
    if status in (401, 403):
        what = "rejected the API key" if status == 401 else "refused access"
        return ep.make(
            AuthError,
            f"the endpoint {what} ({detail}): check HIPPOBOT_API_KEY / {key}.apiKey",
            **fields,
        )
    if status == 429:
        wait = f", asked to retry after {retry_after:g}s" if retry_after is not None else ""
        return ep.make(
            RateLimitError,
            f"rate limited by {ep.api_base} ({detail}{wait}): wait a moment, or lower the request rate",
            **fields,
        )
    if status in (408, 504):
        # 408: the server gave up waiting for the request; 504: a gateway gave up waiting for
        # the server behind it, which may still be computing the answer.
        return ep.make(
            ProviderTimeoutError, f"{ep.api_base} timed out ({detail}): try again later",
            in_flight=status == 504, **fields,
        )
    if status >= 500:
        return ep.make(
            ServerError,
            f"the endpoint failed with a server error ({detail}): try again later",
            **fields,
        )
    if _is_context_too_long(message, code, kind):
        return ep.make(
            ContextTooLongError,
            f"the prompt is too long for the model ({detail}): start a new session with /new "
            "or lower agents.defaults.contextWindowTokens",
            **fields,
        )
    if status == 404:
        return ep.make(
            BadRequestError,
            f"not found at {ep.api_base} ({detail}): check the model name and "
            f"HIPPOBOT_API_BASE / {key}.apiBase",
            **fields,
        )
    return ep.make(
        BadRequestError,
        f"the endpoint rejected the request ({detail}): check the model name "
        "(HIPPOBOT_MODEL / agents.defaults.model) and request settings",
        **fields,
    )


def timed_out(ep: Endpoint, *, in_flight: bool = True) -> ProviderError:
    """Nothing arrived for ``ep.timeout`` seconds. ``in_flight``: the request had been sent
    (the server may still be working on it); otherwise the connection was never made."""
    if not in_flight:
        return ep.make(
            ProviderTimeoutError,
            f"could not connect to {ep.api_base} within {ep.timeout:g}s: is the server running? "
            f"check HIPPOBOT_API_BASE / providers.{ep.name}.apiBase",
            in_flight=False,
        )
    return ep.make(
        ProviderTimeoutError,
        f"no answer from {ep.api_base} within {ep.timeout:g}s: try again, or raise "
        f"providers.{ep.name}.timeout if the model is slow",
    )


def _connection_reason(exc: BaseException) -> str:
    """The most specific cause in the chain, in words (the SDKs wrap it twice or more)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    reason = ""
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cur, ConnectionResetError):
            return "connection reset"
        if isinstance(cur, socket.gaierror):
            return "host name not found"
        if isinstance(cur, OSError) and cur.strerror:
            reason = cur.strerror.lower()
        elif str(cur) and not reason:
            reason = _one_line(str(cur))
        cur = cur.__cause__ or cur.__context__
    text = reason or "connection failed"
    if "refused" in text:  # some transports re-raise refusals as plain text errors
        return "connection refused"
    return text


def unreachable(ep: Endpoint, exc: BaseException) -> ProviderError:
    return ep.make(
        EndpointUnreachableError,
        f"cannot reach {ep.api_base} ({_connection_reason(exc)}): is the server running? "
        f"check HIPPOBOT_API_BASE / providers.{ep.name}.apiBase",
    )


def malformed(ep: Endpoint, what: str = "not valid JSON") -> ProviderError:
    api = "an Anthropic messages API" if ep.kind == "anthropic" else "an OpenAI-compatible API"
    return ep.make(
        MalformedResponseError,
        f"{ep.api_base} sent a response that is {what}: check that HIPPOBOT_API_BASE "
        f"points at {api}",
    )


def interrupted(ep: Endpoint, reason: str) -> ProviderError:
    return ep.make(
        StreamInterruptedError,
        f"the reply from {ep.api_base} stopped before its end ({reason}): try again",
    )


def transport_error(ep: Endpoint, exc: BaseException, *, streaming: bool) -> ProviderError | None:
    """Map an HTTP-client (httpx) or decoding exception; None when it is not one of those.

    ``streaming``: the response had begun. A connection closed before any of it is
    unreachable (nothing is computing it: the server hung up without answering); one closed
    part-way is an interrupted stream, which the server may still be producing."""
    import json

    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return malformed(ep)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        # Connecting, waiting for a pooled connection or writing the body: the server never
        # had the whole request. Reading: it had it, and may still be working on it.
        return timed_out(ep, in_flight=not ({"ConnectTimeout", "PoolTimeout", "WriteTimeout"} & names))
    if streaming and ({"RemoteProtocolError", "ReadError"} & names):
        return interrupted(ep, "connection closed")
    if {"TransportError", "NetworkError"} & names or isinstance(exc, OSError):
        return unreachable(ep, exc)
    return None
