"""The OpenAI-compatible HTTP API in front of the agent (``hippobot serve``).

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/chat/completions`` (JSON or
SSE), ``GET /healthz`` (never needs a key) and ``GET /`` (the read-only memory page, web.py).

Invariants:

* The server owns the history. Of a request's ``messages`` only the newest user message is a
  turn; everything before it is ignored, because the session file already holds it.
* A turn runs as its own task, not as part of the request. A client that disconnects does not
  cut a turn in half: the reply is still saved. Only shutdown cancels a turn, and by then the
  user's message is already on disk (``Agent.turn`` saves it before calling the model).
* Turns of one session are serialised by the agent's per-session lock; turns of different
  sessions run concurrently. At most ``max_queued_per_session`` turns of one session may be
  waiting at once; more get a 429.
* Every error is JSON in the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``.
  Failures of hippobot's own model provider are 502 (or 429), never 401: a 401 would tell the
  client that *its* key is wrong.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hippobot.agent.events import ReplyDelta, ReplyRestart, ToolStarted
from hippobot.errors import (
    AuthError,
    HippobotError,
    NoModelConfiguredError,
    ProviderError,
    RateLimitError,
    UserError,
)
from hippobot.providers.base import Usage
from hippobot.server.web import index
from hippobot.session.keys import validate_key

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent, TurnResult

__all__ = [
    "MODEL_ID",
    "ApiError",
    "ChatCall",
    "ReplyText",
    "TurnGate",
    "create_app",
    "parse_chat_request",
    "session_key",
]

log = logging.getLogger(__name__)

MODEL_ID = "hippobot"
"""The one model ``/v1/models`` lists; requests may name any model (it is echoed back)."""
DEFAULT_SESSION = "default"
MAX_BODY_BYTES = 8 * 1024 * 1024
OPEN_PATHS = frozenset({"/healthz"})


# --- errors ------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered to the client as OpenAI-shaped JSON with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        fields = {"message": self.message, "type": self.kind, "param": self.param}
        return {"error": fields | {"code": self.code}}

    def response(self, headers: Mapping[str, str] | None = None) -> JSONResponse:
        merged = {**self.headers, **(headers or {})}
        return JSONResponse(self.body(), status_code=self.status, headers=merged)


def api_error_for(exc: BaseException) -> ApiError:
    """The HTTP answer for an exception raised by a turn (see the module docstring)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NoModelConfiguredError):
        return ApiError(500, f"the server has no model: {exc}", kind="server_error")
    if isinstance(exc, UserError):
        return ApiError(400, str(exc))
    if isinstance(exc, RateLimitError):
        headers = {}
        if exc.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return ApiError(
            429,
            f"the model provider behind hippobot is rate limiting it: {exc}",
            kind="rate_limit_error",
            code="rate_limit_exceeded",
            headers=headers,
        )
    if isinstance(exc, AuthError):
        return ApiError(
            502,
            "the model provider rejected hippobot's own credentials; the server's provider "
            f"key (providers.*.apiKey or HIPPOBOT_API_KEY) must be fixed: {exc}",
            kind="upstream_error",
            code="upstream_auth_failed",
        )
    if isinstance(exc, ProviderError):
        return ApiError(502, f"the model provider failed: {exc}", kind="upstream_error")
    if isinstance(exc, HippobotError):
        return ApiError(500, str(exc), kind="server_error")
    log.error("turn failed unexpectedly", exc_info=exc)
    return ApiError(
        500,
        f"internal error in hippobot ({type(exc).__name__}); the server log has the details",
        kind="server_error",
    )


ABANDONED = ApiError(
    503,
    "the server shut down before the reply was ready; your message was saved and the "
    "session can be continued after a restart",
    kind="server_error",
    code="server_shutting_down",
)


# --- request parsing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatCall:
    """What one chat-completions request asks for, after validation."""

    key: str  # session key, "api:<id>"
    text: str  # the newest user message: the turn
    model: str  # echoed back in responses
    stream: bool
    include_usage: bool


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """``api:<id>`` from the ``X-Session-Id`` header, else the ``user`` field, else default."""
    raw = headers.get("x-session-id")
    source = "X-Session-Id header"
    if raw is None:
        raw, source = body.get("user"), "'user' field"
    if raw is None:
        raw = DEFAULT_SESSION
    if not isinstance(raw, str) or not raw.strip():
        raise ApiError(400, f"the {source} must be a non-empty string", param="user")
    try:
        return validate_key(f"api:{raw.strip()}")
    except UserError as exc:
        raise ApiError(400, f"the {source} cannot name a session: {exc}", param="user") from None


def _content_text(content: object, index: int) -> str:
    param = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{param} must be a string or a list of text parts", param=param)
    parts: list[str] = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise ApiError(
                400,
                f"{param}[{n}] is a {kind or type(part).__name__!r} part; hippobot serve "
                "accepts text parts only",
                param=param,
            )
        parts.append(part["text"])
    return "\n".join(parts)


def parse_chat_request(body: object, headers: Mapping[str, str]) -> ChatCall:
    """Validate a chat-completions body; raises :class:`ApiError` (400) saying what is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list of messages", param="messages")
    users = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ApiError(400, "'messages' has no message with role 'user'", param="messages")
    index = users[-1]
    text = _content_text(messages[index].get("content"), index)
    if not text.strip():
        raise ApiError(400, "the newest user message is empty", param=f"messages[{index}]")
    model = body.get("model", MODEL_ID)
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' must be a non-empty string", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    if body.get("n", 1) not in (1, None):
        raise ApiError(400, "'n' must be 1: hippobot gives one reply per turn", param="n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    return ChatCall(
        key=session_key(headers, body),
        text=text,
        model=model,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
    )


# --- in-flight turns -------------------------------------------------------------------------


@dataclass(slots=True)
class TurnGate:
    """The server's in-flight turns: admission, a bound per session, and graceful drain.

    ``begin_close`` stops admitting turns (503) and gives those in flight ``timeout`` seconds
    to finish before cancelling them. It is idempotent and runs on the server's loop.
    """

    max_queued_per_session: int = 32
    closing: bool = False
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _per_key: Counter[str] = field(default_factory=Counter)
    _drain: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, key: str, turn: Coroutine[Any, Any, TurnResult]) -> asyncio.Task[TurnResult]:
        if self.closing:
            turn.close()
            raise ApiError(503, "the server is shutting down", kind="server_error",
                           code="server_shutting_down")
        if self._per_key[key] >= self.max_queued_per_session:
            turn.close()
            raise ApiError(
                429,
                f"{self._per_key[key]} turns of session {key} are already waiting; "
                "wait for their replies before sending more",
                kind="rate_limit_error",
                code="session_busy",
                headers={"Retry-After": "1"},
            )
        task = asyncio.get_running_loop().create_task(turn, name=f"turn:{key}")
        self._tasks.add(task)
        self._per_key[key] += 1
        task.add_done_callback(lambda t: self._finished(key, t))
        return task

    def _finished(self, key: str, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._per_key[key] -= 1
        if self._per_key[key] <= 0:
            del self._per_key[key]
        if not task.cancelled():
            task.exception()  # retrieved here: the request that awaited it may be gone

    def begin_close(self, timeout: float) -> asyncio.Task[None]:
        self.closing = True
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_task(self._wait_or_cancel(timeout))
        return self._drain

    async def close(self, timeout: float) -> None:
        await asyncio.shield(self.begin_close(timeout))

    async def _wait_or_cancel(self, timeout: float) -> None:
        tasks = set(self._tasks)
        if not tasks:
            return
        log.warning("waiting up to %gs for %d turn(s) in flight", timeout, len(tasks))
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("abandoned %d turn(s); their user messages are saved", len(pending))
            await asyncio.gather(*pending, return_exceptions=True)


# --- streaming -------------------------------------------------------------------------------


class ReplyText:
    """What to send so the text a client accumulated ends up being the reply.

    Streamed text cannot be unsent. After a :class:`ReplyRestart` (the model call was retried)
    the repeated start of the new attempt is swallowed and only what goes beyond the text
    already sent is streamed; if the new attempt diverges, it is streamed again after a blank
    line. Text of separate model calls (before and after tool steps) is separated by a blank
    line. :meth:`finish` returns whatever of the final reply the client has not seen yet.
    """

    def __init__(self) -> None:
        self._segment = ""  # text sent for the current model call
        self._retry: str | None = None  # text of a retried attempt, while it repeats _segment
        self._new_call = False  # a tool step happened: the next text is a new model call
        self._sent_any = False

    def tool_step(self) -> None:
        self._new_call = True

    def restart(self) -> None:
        if not self._new_call:  # a retry of a call that sent nothing needs no care
            self._retry = ""

    def delta(self, text: str) -> str:
        if self._retry is not None:
            self._retry += text
            if self._segment.startswith(self._retry):
                return ""
            seen, self._segment, self._retry = self._segment, self._retry, None
            if self._segment.startswith(seen):
                return self._segment[len(seen) :]
            return "\n\n" + self._segment
        prefix = ""
        if self._new_call:
            self._new_call, self._segment = False, ""
            prefix = "\n\n" if self._sent_any else ""
        self._segment += text
        self._sent_any = self._sent_any or bool(text)
        return prefix + text

    def finish(self, reply: str) -> str:
        shown = "" if self._new_call else self._segment
        if self._retry is None and reply.startswith(shown):
            rest = reply[len(shown) :]
            return ("\n\n" if rest and not shown and self._sent_any else "") + rest
        return "\n\n" + reply


_END = object()


def _usage(result: TurnResult) -> dict[str, Any]:
    """Token counts of the turn's final model call (zero for commands)."""
    usage = (result.run.usage if result.run is not None else None) or Usage()
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


@dataclass(slots=True)
class _Reply:
    """Wire framing shared by one response's chunks."""

    call: ChatCall
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def completion(self, result: TurnResult) -> dict[str, Any]:
        message = {"role": "assistant", "content": result.reply}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.call.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            "usage": _usage(result),
        }

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return self._sse({"choices": [choice]})

    def usage_chunk(self, result: TurnResult) -> str:
        return self._sse({"choices": [], "usage": _usage(result)})

    def _sse(self, extra: dict[str, Any]) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created}
        return _event(body | {"model": self.call.model} | extra)


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _outcome(task: asyncio.Task[TurnResult]) -> TurnResult | ApiError:
    await asyncio.wait({task})  # never cancels the turn, even if this request is cancelled
    if task.cancelled():
        return ABANDONED
    exc = task.exception()
    return api_error_for(exc) if exc is not None else task.result()


async def _sse_stream(
    call: ChatCall,
    task: asyncio.Task[TurnResult],
    queue: asyncio.Queue[object],
    first: list[object],
) -> AsyncIterator[str]:
    reply, text = _Reply(call), ReplyText()
    yield reply.chunk({"role": "assistant", "content": ""})
    items = list(first)
    while True:
        item = items.pop(0) if items else await queue.get()
        if item is _END:
            break
        if isinstance(item, ReplyDelta):
            piece = text.delta(item.text)
            if piece:
                yield reply.chunk({"content": piece})
        elif isinstance(item, ReplyRestart):
            text.restart()
        elif isinstance(item, ToolStarted):
            text.tool_step()
            yield f": tool step {item.name}\n\n"  # an SSE comment: clients ignore it
    result = await _outcome(task)
    if isinstance(result, ApiError):
        yield _event(result.body())
        return
    rest = text.finish(result.reply)
    if rest:
        yield reply.chunk({"content": rest})
    yield reply.chunk({}, "stop")
    if call.include_usage:
        yield reply.usage_chunk(result)
    yield "data: [DONE]\n\n"


# --- routes ----------------------------------------------------------------------------------


def _models() -> dict[str, Any]:
    return {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "hippobot"}


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_models()]})


async def get_model(request: Request) -> Response:
    name = request.path_params["model"]
    if name != MODEL_ID:
        raise ApiError(404, f"the model {name!r} does not exist; use {MODEL_ID!r}",
                       code="model_not_found", param="model")
    return JSONResponse(_models())


async def healthz(request: Request) -> Response:
    gate: TurnGate = request.app.state.gate
    status = "shutting_down" if gate.closing else "ok"
    return JSONResponse(
        {"status": status, "turns_in_flight": len(gate)}, status_code=503 if gate.closing else 200
    )


async def _read_json(request: Request) -> object:
    body = await request.body()
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise ApiError(400, "the request body is not valid JSON") from None


def _shows_progress(item: object) -> bool:
    return item is _END or isinstance(item, ReplyDelta | ToolStarted)


async def chat_completions(request: Request) -> Response:
    call = parse_chat_request(await _read_json(request), request.headers)
    agent: Agent = request.app.state.agent
    gate: TurnGate = request.app.state.gate
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def turn() -> TurnResult:
        try:
            return await agent.turn(call.key, call.text, on_event=queue.put_nowait)
        finally:
            queue.put_nowait(_END)

    task = gate.start(call.key, turn())
    headers = {"X-Session-Id": call.key}
    if not call.stream:
        result = await _outcome(task)
        if isinstance(result, ApiError):
            return result.response(headers)
        return JSONResponse(_Reply(call).completion(result), headers=headers)
    # Hold the status line until the turn shows a sign of life, so that a failure before any
    # output (bad upstream key, rate limit) is a real HTTP error the SDK can act on.
    first = [await queue.get()]
    while not _shows_progress(first[-1]):
        first.append(await queue.get())
    if first[-1] is _END:
        result = await _outcome(task)
        if isinstance(result, ApiError):
            return result.response(headers)
    headers |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _sse_stream(call, task, queue, first), media_type="text/event-stream", headers=headers
    )


# --- auth, errors, lifespan ---------------------------------------------------------------


def bearer_ok(authorization: str | None, api_key: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <key>`` header."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode(), api_key.encode())


UNAUTHORIZED = ApiError(
    401,
    "missing or wrong API key: send 'Authorization: Bearer <key>' with the key configured "
    "as serve.apiKey or HIPPOBOT_SERVE_KEY on the server",
    code="invalid_api_key",
    headers={"WWW-Authenticate": "Bearer"},
)


class BearerAuth:
    """Every path but ``/healthz`` needs the key when one is configured."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and self.api_key
            and scope["path"] not in OPEN_PATHS
            and not bearer_ok(Headers(scope=scope).get("authorization"), self.api_key)
        ):
            await UNAUTHORIZED.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return ApiError(404, f"no such endpoint: {request.method} {request.url.path}",
                        code="not_found").response()
    kind = "server_error" if exc.status_code >= 500 else "invalid_request_error"
    return ApiError(exc.status_code, str(exc.detail), kind=kind, headers=exc.headers).response()


async def _on_crash(request: Request, exc: Exception) -> Response:
    return api_error_for(exc).response()


def create_app(
    agent: Agent,
    *,
    api_key: str | None,
    shutdown_timeout: float = 30.0,
    max_queued_per_session: int = 32,
    run_schedulers: bool = True,
) -> Starlette:
    """The ASGI app. Its lifespan starts the agent's schedulers (Dream, idle compaction) and,
    at shutdown, drains in-flight turns (``shutdown_timeout``), stops the schedulers and
    closes the agent. ``app.state.gate`` is the :class:`TurnGate`, ``app.state.schedulers``
    the scheduler tasks."""
    gate = TurnGate(max_queued_per_session=max_queued_per_session)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        schedulers = agent.start_schedulers() if run_schedulers else []
        app.state.schedulers = schedulers
        try:
            yield
        finally:
            await gate.close(shutdown_timeout)
            for task in schedulers:
                task.cancel()
            await asyncio.gather(*schedulers, return_exceptions=True)
            await agent.aclose(shutdown_timeout)  # also closes the model connections

    app = Starlette(
        routes=[
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/", index, methods=["GET"]),
        ],
        exception_handlers={ApiError: _on_api_error, HTTPException: _on_http_error,
                            Exception: _on_crash},
        lifespan=lifespan,
        max_body_size=MAX_BODY_BYTES,
    )
    app.add_middleware(BearerAuth, api_key=api_key)
    app.state.agent = agent
    app.state.gate = gate
    return app
