"""A programmable fake model: tests queue replies and faults, it records every request.

One :class:`ScriptedModel` holds a FIFO queue of *steps*. Every call to the model (in-process
through :class:`ScriptedProvider`, or over HTTP through
:class:`hippobot.testing.server.ScriptedServer`) records a :class:`RecordedRequest` and
consumes exactly one step:

* ``reply`` / ``reply_tool_call(s)``: a normal answer;
* ``fail(status)``: an HTTP error (in-process: the same typed error an adapter would raise);
* ``cut_stream(n)``: the first ``n`` characters of the reply queued *after* it, then the
  connection drops; that reply stays queued for the retry;
* ``malformed()``: a 200 answer whose body is not JSON;
* ``hang(seconds)``: no answer for ``seconds`` (a client with a shorter timeout gives up;
  a client still waiting then gets a 504).

A reply may be slow the way local models are: ``delay`` seconds before its first token (the
model reading the prompt), nothing sent meanwhile (llama.cpp's server, Ollama) or, with
``keepalive``, the response headers at once and an SSE comment every ``keepalive`` seconds
(llama-cpp-python's server pings every 15 s); ``pause=(chars, seconds)`` stops the stream for
``seconds`` after its first ``chars`` characters.

A single-slot server: ``ScriptedModel(slots=1)`` answers one request at a time, later ones
wait their turn inside the server (like llama-cpp-python with ``interrupt_requests`` off);
:attr:`ScriptedModel.peak_in_flight` is the most requests it ever had at once, waiting or
answered.

What the server says about itself is not queued either: :meth:`ScriptedModel.serve_like`
makes it answer the metadata requests of llama.cpp (``GET /props``, ``GET /slots``), vLLM
(``max_model_len`` in ``GET /v1/models``) or Ollama (``POST /api/show``) with a context size;
by default it answers them 404, as llama-cpp-python's server does.

Embeddings (``POST /v1/embeddings`` over HTTP) are not queued: set
:attr:`ScriptedModel.embedding` to a function from text to vector (``None`` answers 404),
:attr:`ScriptedModel.embedding_delay` to make each call slow, and read
:attr:`ScriptedModel.embedding_inputs` for what was asked.

A call with nothing queued and no :attr:`ScriptedModel.fallback` fails loudly: in-process it
raises :class:`UnscriptedCallError`; over HTTP it answers 500 and records the problem in
:attr:`ScriptedModel.errors`, which the pytest fixture turns into a test failure.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from hippobot.messages import content_text, user_words
from hippobot.providers import _errors
from hippobot.providers.base import (
    ChatRequest,
    Finish,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)

__all__ = [
    "FallbackReply",
    "RecordedRequest",
    "ScriptedCall",
    "ScriptedModel",
    "ScriptedProvider",
    "UnscriptedCallError",
]

Api = Literal["openai", "anthropic"]


class UnscriptedCallError(AssertionError):
    """The code under test called the model more often than the test scripted.

    An ``AssertionError`` on purpose: it is a bug in the test or the code, and code that
    catches :class:`hippobot.errors.ProviderError` must not swallow it.
    """


@dataclass(slots=True)
class RecordedRequest:
    """One call as the model saw it. ``messages``/``tools`` are OpenAI-shaped whatever the
    API (Anthropic requests are converted back); ``raw`` is the body exactly as sent."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str
    tool_choice: Any
    stream: bool
    api: Api
    headers: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def last_user_text(self) -> str:
        """Text of the last user message ("" if there is none)."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return content_text(msg.get("content"))
        return ""

    def last_user_words(self) -> str:
        """What the user typed in the last user message, without hippobot's runtime block."""
        return user_words(self.last_user_text())


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    id: str
    name: str
    arguments: str  # sent verbatim, so it may be invalid JSON on purpose


@dataclass(frozen=True, slots=True)
class FallbackReply:
    """What a ``fallback`` may return instead of plain text: text and tool calls, and how
    slowly they come (``delay``, ``keepalive``: see :meth:`ScriptedModel.reply`)."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any] | str], ...] = ()
    delay: float = 0.0
    keepalive: float | None = None


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    finish_reason: str | None = None  # None: "tool_calls" with calls, else "stop"
    delay: float = 0.0  # seconds before the first token
    keepalive: float | None = None  # headers at once, then an SSE comment this often
    pause: tuple[int, float] | None = None  # (after this many characters, seconds of silence)

    def finish(self) -> str:
        """The OpenAI finish reason this reply reports."""
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


@dataclass(frozen=True, slots=True)
class _Fail:
    status: int
    retry_after: float | None
    body: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class _Cut:
    after_chars: int


@dataclass(frozen=True, slots=True)
class _Malformed:
    pass


@dataclass(frozen=True, slots=True)
class _Hang:
    seconds: float


_Step = _Reply | _Fail | _Cut | _Malformed | _Hang


@dataclass(frozen=True, slots=True)
class Plan:
    """What one call must answer, resolved under the model's lock (internal)."""

    step: _Step | None  # None: unscripted
    reply: _Reply  # content of a reply, or of a cut stream
    usage: Usage
    error: str = ""  # why the call is unscripted

    def fail_headers(self) -> dict[str, str]:
        if isinstance(self.step, _Fail) and self.step.retry_after is not None:
            seconds = self.step.retry_after
            return {"retry-after": f"{seconds:g}", "retry-after-ms": f"{seconds * 1000:g}"}
        return {}


_CUT_FILLER = _Reply(text="partial output that will never be finished " * 4)


class ScriptedModel:
    """The script and the record of one fake model. Thread-safe; see the module docstring."""

    def __init__(self, *, model_name: str = "scripted-model", slots: int | None = None) -> None:
        self.model_name = model_name
        self.slots = slots
        self._slot = threading.BoundedSemaphore(slots) if slots else None
        self.in_flight = 0
        self.peak_in_flight = 0
        self.fallback: Callable[[RecordedRequest], str | FallbackReply] | None = None
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        self._queue: deque[_Step] = deque()
        self._usage: deque[Usage] = deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.embedding: Callable[[str], list[float]] | None = None
        self.embedding_delay: float = 0.0
        self.embedding_inputs: list[str] = []
        self.server_kind: Literal["llama.cpp", "vllm", "ollama"] | None = None
        self.server_context: int | None = None
        self.model_max_context: int | None = None

    def serve_like(
        self,
        kind: Literal["llama.cpp", "vllm", "ollama"],
        *,
        n_ctx: int | None,
        model_max: int | None = None,
    ) -> ScriptedModel:
        """Answer the metadata requests of that server with a context of ``n_ctx`` tokens
        (Ollama: ``num_ctx`` in the model's parameters, none when ``None``; ``model_max``:
        the context length the model itself supports)."""
        self.server_kind, self.server_context, self.model_max_context = kind, n_ctx, model_max
        return self

    # --- scripting ----------------------------------------------------------------

    def _push(self, step: _Step) -> ScriptedModel:
        with self._lock:
            self._queue.append(step)
        return self

    def reply(
        self, text: str, *, finish_reason: str | None = None, delay: float = 0.0,
        keepalive: float | None = None, pause: tuple[int, float] | None = None,
    ) -> ScriptedModel:
        """Queue a plain text answer; ``finish_reason="length"`` reports it as cut short.

        ``delay``: seconds before the first token, nothing sent meanwhile, or with
        ``keepalive`` the headers at once and an SSE comment every ``keepalive`` seconds;
        ``pause=(chars, seconds)``: silence for ``seconds`` after the first ``chars``
        characters."""
        return self._push(_Reply(text=text, finish_reason=finish_reason, delay=delay,
                                 keepalive=keepalive, pause=pause))

    def reply_tool_call(
        self, name: str, args: dict[str, Any] | str, id: str | None = None, *, text: str = "",
        delay: float = 0.0, keepalive: float | None = None,
    ) -> ScriptedModel:
        """Queue an answer with one tool call; ``str`` args are sent verbatim (``delay``,
        ``keepalive``: as for :meth:`reply`)."""
        return self._push(_Reply(text=text, tool_calls=(self._call(name, args, id),),
                                 delay=delay, keepalive=keepalive))

    def reply_tool_calls(
        self, calls: list[tuple[str, dict[str, Any] | str]], *, text: str = ""
    ) -> ScriptedModel:
        """Queue an answer with several tool calls, in order."""
        return self._push(
            _Reply(text=text, tool_calls=tuple(self._call(n, a, None) for n, a in calls))
        )

    def fail(
        self, status: int, *, retry_after: float | None = None, body: dict[str, Any] | None = None
    ) -> ScriptedModel:
        """Queue an HTTP error. ``body`` replaces the vendor-shaped error JSON."""
        return self._push(_Fail(status, retry_after, body))

    def cut_stream(self, after_chars: int) -> ScriptedModel:
        """Queue a reply that stops after ``after_chars`` characters of the next reply."""
        return self._push(_Cut(after_chars))

    def malformed(self) -> ScriptedModel:
        """Queue a 200 answer whose body is not valid JSON."""
        return self._push(_Malformed())

    def hang(self, seconds: float) -> ScriptedModel:
        """Queue a call that gets no answer for ``seconds``."""
        return self._push(_Hang(seconds))

    def usage(
        self, *, prompt_tokens: int = 0, completion_tokens: int = 0, cached_tokens: int = 0
    ) -> ScriptedModel:
        """Report these token counts with the next reply the model serves (called several
        times, with that many replies, in order)."""
        with self._lock:
            self._usage.append(Usage(prompt_tokens, completion_tokens, cached_tokens))
        return self

    def pending(self) -> int:
        """Number of queued steps not consumed yet."""
        with self._lock:
            return len(self._queue)

    def _call(self, name: str, args: dict[str, Any] | str, id: str | None) -> ScriptedCall:
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return ScriptedCall(id=id or f"call_{next(self._ids)}", name=name, arguments=arguments)

    # --- serving (used by ScriptedProvider and ScriptedServer) -----------------------

    def arrive(self) -> None:
        """A request came in: count it, then wait for a free slot (``slots``)."""
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        if self._slot is not None:
            self._slot.acquire()

    def leave(self) -> None:
        """The request's answer is over (sent, or its client gone)."""
        if self._slot is not None:
            self._slot.release()
        with self._lock:
            self.in_flight -= 1

    def take(self, request: RecordedRequest) -> Plan:
        """Record ``request`` and consume the step that answers it."""
        with self._lock:
            self.requests.append(request)
            step = self._queue.popleft() if self._queue else None
            if step is None and self.fallback is None:
                error = (
                    f"unscripted model call #{len(self.requests)} ({request.api} API): nothing "
                    f"queued; last user message: {request.last_user_text()[:300]!r}"
                )
                self.errors.append(error)
                return Plan(None, _Reply(), Usage(), error)
            fallback = self.fallback
        if step is None:
            assert fallback is not None
            answer = fallback(request)
            if isinstance(answer, FallbackReply):
                step = _Reply(
                    text=answer.text,
                    tool_calls=tuple(self._call(n, a, None) for n, a in answer.tool_calls),
                    delay=answer.delay, keepalive=answer.keepalive,
                )
            else:
                step = _Reply(text=answer)
        with self._lock:
            if isinstance(step, _Cut):
                following = next((s for s in self._queue if isinstance(s, _Reply)), None)
                return Plan(step, following or _CUT_FILLER, Usage())
            if not isinstance(step, _Reply):
                return Plan(step, _Reply(), Usage())
            usage = self._usage.popleft() if self._usage else None
        return Plan(step, step, usage or estimate_usage(request, step))


def estimate_usage(request: RecordedRequest, reply: _Reply) -> Usage:
    """Deterministic token counts: about four characters per token."""
    prompt_chars = len(json.dumps(request.tools)) if request.tools else 0
    for msg in request.messages:
        prompt_chars += len(content_text(msg.get("content")))
        for call in msg.get("tool_calls") or []:
            prompt_chars += len(str(call.get("function", {}).get("arguments", "")))
    reply_chars = len(reply.text) + sum(len(c.arguments) + len(c.name) for c in reply.tool_calls)
    return Usage(max(1, prompt_chars // 4), max(1, reply_chars // 4), 0)


def split_text(text: str, pieces: int = 3) -> list[str]:
    """Split ``text`` into up to ``pieces`` non-empty fragments (for streamed deltas)."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        403: "permission_denied",
        404: "invalid_request_error",
        429: "rate_limit_exceeded",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def default_fail_message(status: int) -> str:
    return f"scripted failure (HTTP {status})"


class ScriptedProvider:
    """A :class:`~hippobot.providers.base.Provider` answering from a :class:`ScriptedModel`
    in-process, raising the same typed errors the HTTP adapters would."""

    def __init__(self, model: ScriptedModel, name: str = "scripted") -> None:
        self.model = model
        self.name = name
        self._endpoint = _errors.Endpoint(
            name=name, api_base="scripted://model", timeout=0.0, kind="openai"
        )

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        raw: dict[str, Any] = {
            "model": request.model,
            "messages": copy.deepcopy(request.messages),
            "tools": copy.deepcopy(request.tools),
            "tool_choice": request.tool_choice,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.stop:
            raw["stop"] = list(request.stop)
        recorded = RecordedRequest(
            messages=cast(list[dict[str, Any]], raw["messages"]),
            tools=cast(list[dict[str, Any]], raw["tools"]),
            model=request.model,
            tool_choice=request.tool_choice,
            stream=True,
            api="openai",
            raw=raw,
        )
        plan = self.model.take(recorded)
        step, ep = plan.step, self._endpoint
        if step is None:
            raise UnscriptedCallError(plan.error)
        if isinstance(step, _Hang):
            await asyncio.sleep(step.seconds)
            raise _errors.timed_out(ep)
        if isinstance(step, _Fail):
            body = step.body or openai_error_body(step.status, default_fail_message(step.status))
            raise _errors.from_status(ep, step.status, headers=plan.fail_headers(), body=body)
        if isinstance(step, _Malformed):
            raise _errors.malformed(ep)
        if isinstance(step, _Cut):
            for piece in split_text(plan.reply.text[: step.after_chars]):
                yield TextDelta(piece)
            raise _errors.interrupted(ep, "connection closed")
        reply = plan.reply
        if reply.delay:
            await asyncio.sleep(reply.delay)
        at, silence = reply.pause or (len(reply.text), 0.0)
        for piece in split_text(reply.text[:at]):
            yield TextDelta(piece)
        if silence:
            await asyncio.sleep(silence)
        for piece in split_text(reply.text[at:]):
            yield TextDelta(piece)
        for call in plan.reply.tool_calls:
            yield ToolCallEvent(call.id, call.name, call.arguments)
        yield plan.usage
        finish = plan.reply.finish()
        yield Finish("length" if finish == "length" else "tool_calls" if finish == "tool_calls" else "stop")
