"""The OpenAI chat-completions wire format as ``hippobot serve`` speaks it.

Request parsing and validation (:func:`parse_chat_request`), the OpenAI error shape
``{"error": {"message", "type", "param", "code"}}`` and the mapping of hippobot's exceptions
onto it (:func:`api_error_for`), and the response framing: one JSON completion, or an SSE
stream of ``chat.completion.chunk`` events ending in ``data: [DONE]``.

Invariants: every error a client sees is an :class:`ApiError`; failures of hippobot's own
model provider are 502 (or 429), never 401. Text already streamed is never contradicted:
:class:`ReplyText` only appends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails
from starlette.requests import Request
from starlette.responses import JSONResponse

from hippobot.errors import (
    AuthError,
    HippobotError,
    NoModelConfiguredError,
    ProviderError,
    RateLimitError,
    UserError,
)
from hippobot.loop.events import Remembered, ReplyDelta, ReplyRestart, ToolStarted
from hippobot.messages import unencodable
from hippobot.providers.base import Usage
from hippobot.server import identity
from hippobot.server.identity import DEFAULT_SESSION

if TYPE_CHECKING:
    from hippobot.agent.agent import TurnResult

__all__ = [
    "ABANDONED",
    "DEFAULT_SESSION",
    "END",
    "MODEL_ID",
    "ApiError",
    "ChatCall",
    "Reply",
    "ReplyText",
    "api_error_for",
    "finish_reason",
    "outcome",
    "parse_chat_request",
    "read_json",
    "replayed_stream",
    "session_key",
    "sse_stream",
]

_T = TypeVar("_T")

# The name it had before this module was split out of app.py, so log filters keep working.
log = logging.getLogger("hippobot.server.app")

MODEL_ID = "hippobot"
"""The one model ``/v1/models`` lists; requests may name any model (it is echoed back)."""


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
    max_tokens: int | None = None  # the client's cap on the reply (the config caps it too)
    stop: tuple[str, ...] = ()
    stateless: bool = False  # a client task prompt: no session, no memory
    messages: tuple[tuple[str, str], ...] = ()  # (role, text) as sent; used when stateless


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """The session a request continues (see :mod:`hippobot.server.identity`); 400 if bad."""
    try:
        return identity.session_key(headers, body)
    except identity.IdentityError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None


def _encodable(value: _T) -> _T:
    """Text that cannot be encoded (a lone surrogate) is refused: stored, it would fail every
    later turn of the session."""
    problem = unencodable(value) if isinstance(value, str) else None
    if problem is not None:
        raise ValueError(problem)
    return value


_Encodable = AfterValidator(_encodable)
_Name = Annotated[str, Field(min_length=1), _Encodable]


class _TextPart(BaseModel):
    type: Literal["text"]
    text: Annotated[str, _Encodable]


_Content = Annotated[str, _Encodable] | list[_TextPart] | None
_CONTENT: TypeAdapter[_Content] = TypeAdapter(_Content, config=ConfigDict(strict=True))


class ChatBody(BaseModel):
    """The fields of a chat-completions body that hippobot reads; other fields are accepted
    and ignored. Strict: ``"true"`` is not true and ``5.0`` is not a token count."""

    model_config = ConfigDict(strict=True)

    session_id: Annotated[Any, _Encodable] = None  # checked by identity.session_key
    user: Annotated[Any, _Encodable] = None
    # read where used (_role, _content_text): an entry that is not an object is passed over
    messages: Annotated[list[Any], Field(min_length=1)]
    model: _Name = MODEL_ID
    stream: bool | None = None
    n: Literal[1] | None = None
    stream_options: Annotated[dict[str, Any] | None, BeforeValidator(lambda v: v or None)] = None
    max_completion_tokens: PositiveInt | None = None
    max_tokens: PositiveInt | None = None  # ignored when max_completion_tokens is given
    stop: _Name | Annotated[list[_Name], Field(min_length=1, max_length=4)] | None = None
    response_format: Any = None
    tools: Any = None
    tool_choice: Any = None

    @model_validator(mode="before")
    @classmethod
    def _newer_cap_wins(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_completion_tokens") is not None:
            return {k: v for k, v in data.items() if k != "max_tokens"}
        return data


_INVALID = {
    "messages": "'messages' must be a non-empty list of messages",
    "model": "'model' must be a non-empty string",
    "stream": "'stream' must be true or false",
    "n": "'n' must be 1: hippobot gives one reply per turn",
    "stream_options": "'stream_options' must be an object",
    "max_completion_tokens": "'max_completion_tokens' must be a positive integer",
    "max_tokens": "'max_tokens' must be a positive integer",
    "stop": "'stop' must be a string or a list of 1 to 4 strings",
}


def _unencodable_text(errors: list[ErrorDetails], field: object = None) -> str | None:
    """Why a text that failed (in ``field``) cannot be used, if that was the failure: a lone
    surrogate, found by :func:`_encodable` or by pydantic itself for a constrained string."""
    for error in errors:
        text, kind = error["input"], error["type"]
        if field in (None, error["loc"][0]) and kind in ("value_error", "string_unicode"):
            return unencodable(text) if isinstance(text, str) else None
    return None


def _invalid(exc: ValidationError) -> ApiError:
    """The 400 for the first field that failed."""
    errors = exc.errors(include_url=False)
    if not errors[0]["loc"]:
        return ApiError(400, "the request body must be a JSON object")
    field = str(errors[0]["loc"][0])
    problem = _unencodable_text(errors, field)
    if problem is not None:
        return ApiError(400, f"'{field}' cannot be used: {problem}", param=f"'{field}'")
    return ApiError(400, _INVALID[field], param=field)


def _content_text(content: object, index: int) -> str:
    param = f"messages[{index}].content"
    try:
        value = _CONTENT.validate_python(content)
    except ValidationError as exc:
        raise ApiError(400, _content_problem(exc, content, param), param=param) from None
    return "\n".join(p.text for p in value) if isinstance(value, list) else value or ""


def _content_problem(exc: ValidationError, content: Any, param: str) -> str:
    errors = exc.errors(include_url=False)
    problem = _unencodable_text(errors)
    if problem is not None:
        return f"{param} cannot be used: {problem}"
    parts = [e["loc"][1] for e in errors if len(e["loc"]) > 1]  # ("list[_TextPart]", n, ...)
    if not parts:
        return f"{param} must be a string or a list of text parts"
    part = content[parts[0]]
    kind = part.get("type") if isinstance(part, dict) else None
    return (
        f"{param}[{parts[0]}] is a {kind or type(part).__name__!r} part; hippobot serve "
        "accepts text parts only"
    )


_OWN_TOOLS = (
    "hippobot runs its own tools on the server and never returns tool calls to the client"
)


def _refuse_client_tools(body: ChatBody) -> None:
    """Client-side tool use cannot work through hippobot: say so instead of pretending."""
    choice = body.tool_choice
    if body.tools and (choice == "required" or isinstance(choice, dict)):
        raise ApiError(
            400,
            f"'tool_choice' {json.dumps(choice)} asks for a call to one of your tools; "
            f"{_OWN_TOOLS}. Send the request without 'tools' (or with tool_choice 'auto').",
            param="tool_choice",
        )
    role = _role(body.messages[-1])
    if role in ("tool", "function"):
        raise ApiError(
            400,
            f"the request ends with a {role!r} message, a result for a tool call "
            f"hippobot never made: {_OWN_TOOLS}. End the request with a user message.",
            param=f"messages[{len(body.messages) - 1}]",
        )


def _refuse_response_format(fmt: object) -> None:
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind != "text":
        raise ApiError(
            400,
            f"'response_format' {json.dumps(kind)} is not supported: a hippobot reply is a turn "
            "of a conversation, written with its own tools and memory, and cannot be held to "
            "a schema. Leave response_format out (or use {\"type\": \"text\"}).",
            param="response_format",
        )


def _role(message: object) -> object:
    return message.get("role") if isinstance(message, dict) else None


def _newest_user_text(messages: list[Any]) -> str:
    users = [i for i, m in enumerate(messages) if _role(m) == "user"]
    if not users:
        raise ApiError(400, "'messages' has no message with role 'user'", param="messages")
    text = _content_text(messages[users[-1]].get("content"), users[-1])
    if not text.strip():
        raise ApiError(400, "the newest user message is empty", param=f"messages[{users[-1]}]")
    return text


def _as_sent(messages: list[Any]) -> tuple[tuple[str, str], ...]:
    """(role, text) of every message a stateless answer replays."""
    return tuple(
        (m["role"], _content_text(m.get("content"), i))
        for i, m in enumerate(messages)
        if _role(m) in ("system", "developer", "user", "assistant")
    )


def parse_chat_request(body: object, headers: Mapping[str, str]) -> ChatCall:
    """Validate a chat-completions body; raises :class:`ApiError` (400) saying what is wrong."""
    try:
        request = ChatBody.model_validate(body)
    except ValidationError as exc:
        raise _invalid(exc) from None
    _refuse_client_tools(request)
    text = _newest_user_text(request.messages)
    _refuse_response_format(request.response_format)
    stateless = identity.is_task_prompt(text, headers)
    stop = request.stop
    return ChatCall(
        key="" if stateless else session_key(headers, cast(Mapping[str, Any], body)),
        text=text,
        model=request.model,
        stream=bool(request.stream),
        include_usage=bool((request.stream_options or {}).get("include_usage")),
        max_tokens=request.max_completion_tokens or request.max_tokens,
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        stateless=stateless,
        messages=_as_sent(request.messages) if stateless else (),
    )


async def read_json(request: Request) -> object:
    """The request body as JSON (an empty body is ``None``); 400 if it is not JSON."""
    body = await request.body()
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise ApiError(400, "the request body is not valid JSON") from None
    except RecursionError:  # valid JSON, nested deeper than any request needs
        raise ApiError(400, "the request body is JSON nested too deeply; send a flat request") from None


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


END = object()  # put on a turn's event queue when the turn is over, however it ended


def _usage(result: TurnResult) -> dict[str, Any]:
    """Token counts summed over every model call of the turn (zero for commands)."""
    usage = result.run.total_usage if result.run is not None else Usage()
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def finish_reason(result: TurnResult) -> str:
    """What the model reported for the final answer (``length``: cut by max_tokens)."""
    return result.run.finish_reason if result.run is not None else "stop"


@dataclass(slots=True)
class Reply:
    """Wire framing shared by one response's chunks."""

    call: ChatCall
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def completion(self, result: TurnResult) -> dict[str, Any]:
        message = {"role": "assistant", "content": result.reply}
        # What hippobot itself kept in memory rides beside the standard fields, where
        # OpenAI clients ignore it.
        extra = {"hippobot": {"remembered": result.remembered}} if result.remembered else {}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.call.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason(result),
                    "logprobs": None,
                }
            ],
            "usage": _usage(result),
        } | extra

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


async def outcome(task: asyncio.Future[TurnResult]) -> TurnResult | ApiError:
    """The turn's result, or the :class:`ApiError` that answers its failure."""
    await asyncio.wait({task})  # never cancels the turn, even if this request is cancelled
    if task.cancelled():
        return ABANDONED
    exc = task.exception()
    return api_error_for(exc) if exc is not None else task.result()


async def sse_stream(
    call: ChatCall,
    task: asyncio.Task[TurnResult],
    queue: asyncio.Queue[object],
    first: list[object],
    reply: Reply | None = None,
) -> AsyncIterator[str]:
    """The SSE body of a streamed reply: ``first`` events, then ``queue`` until :data:`END`."""
    reply, text = reply or Reply(call), ReplyText()
    yield reply.chunk({"role": "assistant", "content": ""})
    items = list(first)
    while True:
        item = items.pop(0) if items else await queue.get()
        if item is END:
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
        elif isinstance(item, Remembered):
            yield f": hippobot {' '.join(item.text.split())}\n\n"
    result = await outcome(task)
    if isinstance(result, ApiError):
        yield _event(result.body())
        return
    rest = text.finish(result.reply)
    if rest:
        yield reply.chunk({"content": rest})
    for event in _closing(reply, call, result):
        yield event


def _closing(reply: Reply, call: ChatCall, result: TurnResult) -> list[str]:
    events = [reply.chunk({}, finish_reason(result))]
    if call.include_usage:
        events.append(reply.usage_chunk(result))
    return [*events, "data: [DONE]\n\n"]


async def replayed_stream(
    call: ChatCall, task: asyncio.Future[TurnResult], reply: Reply
) -> AsyncIterator[str]:
    """The SSE body for a retry: the turn's whole reply (or its error) once it is over."""
    result = await outcome(task)
    if isinstance(result, ApiError):
        yield _event(result.body())
        return
    yield reply.chunk({"role": "assistant", "content": ""})
    if result.reply:
        yield reply.chunk({"content": result.reply})
    for event in _closing(reply, call, result):
        yield event
