"""Adapter for OpenAI-compatible chat-completions endpoints.

One class serves OpenAI, OpenRouter, DeepSeek, vLLM, Ollama and llama.cpp: they differ by
base URL and a few quirks, which are data here, not subclasses. The ``openai`` SDK is
imported only when the first request is made (importing it costs over a second).

Invariants of :meth:`OpenAICompatProvider.stream`:

* events come in the order ``TextDelta* ToolCallEvent* Usage? Finish``;
* a tool call is yielded once, complete, with its argument fragments joined verbatim
  (invalid JSON is passed through; the agent loop reports it to the model);
* a stream that ends without a finish reason raises ``StreamInterruptedError``;
* only :class:`hippobot.errors.ProviderError` subclasses escape, never SDK exceptions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hippobot.errors import ProviderError
from hippobot.providers import _errors
from hippobot.providers._client import LoopBoundClient, http_client, sent_as_is
from hippobot.providers.base import (
    ChatRequest,
    Finish,
    FinishReason,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["DEFAULT_OPENAI_BASE", "OpenAICompatProvider"]

DEFAULT_OPENAI_BASE = "https://api.openai.com/v1"

# OpenAI's own API rejects ``max_tokens`` for its reasoning models; compatible servers
# (Ollama, llama.cpp, older vLLM) only know ``max_tokens`` and silently ignore the new key,
# so a local model would generate until its context is full. Decided by where the requests
# go, not by the provider's name: "openai" pointed at a local server is a local server.
_USES_MAX_COMPLETION_TOKENS = frozenset({"api.openai.com"})
# Local servers accept any key, but the SDK refuses to send a request without one.
_PLACEHOLDER_KEY = "no-key"

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamState:
    """Folds chat-completion chunks into events; knows nothing about HTTP."""

    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage | None = None
    calls_sent: bool = False

    def feed(self, chunk: Any) -> Iterator[StreamEvent]:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = _usage(usage)
        for choice in getattr(chunk, "choices", None) or []:
            delta = getattr(choice, "delta", None)
            if delta is not None:
                content = getattr(delta, "content", None)
                if content:
                    yield TextDelta(content)
                for position, tc in enumerate(getattr(delta, "tool_calls", None) or []):
                    self._add_fragment(tc, position)
            if getattr(choice, "finish_reason", None):
                self.finish = choice.finish_reason
                yield from self.flush_calls()

    def _add_fragment(self, tc: Any, position: int) -> None:
        index = tc.index if getattr(tc, "index", None) is not None else position
        call = self.calls.setdefault(index, _PartialCall())
        if getattr(tc, "id", None):
            call.id = tc.id
        fn = getattr(tc, "function", None)
        if fn is not None:
            if getattr(fn, "name", None):
                call.name = fn.name
            if getattr(fn, "arguments", None):
                call.arguments.append(fn.arguments)

    def flush_calls(self) -> Iterator[StreamEvent]:
        if self.calls_sent:
            return
        self.calls_sent = True
        for n, index in enumerate(sorted(self.calls)):
            call = self.calls[index]
            yield ToolCallEvent(call.id or f"call_{n}", call.name, "".join(call.arguments))

    def reason(self) -> FinishReason:
        reason = _FINISH.get(self.finish or "", "stop")
        if reason == "stop" and self.calls:
            return "tool_calls"
        return reason


def _usage(usage: Any) -> Usage:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None:  # DeepSeek reports cache hits in its own field
        cached = getattr(usage, "prompt_cache_hit_tokens", None)
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cached_tokens=int(cached or 0),
    )


class OpenAICompatProvider:
    """A :class:`~hippobot.providers.base.Provider` for chat-completions endpoints."""

    def __init__(
        self,
        *,
        api_key: str,
        api_base: str | None,
        extra_headers: dict[str, str] | None = None,
        timeout: float = 120.0,
        name: str = "openai",
    ) -> None:
        self.name = name
        self.api_base = (api_base or DEFAULT_OPENAI_BASE).rstrip("/")
        host = urlsplit(self.api_base).hostname or ""
        self._max_tokens_key = (
            "max_completion_tokens" if host in _USES_MAX_COMPLETION_TOKENS else "max_tokens"
        )
        self._api_key = api_key or _PLACEHOLDER_KEY
        self._extra_headers = dict(extra_headers or {})
        self._timeout = timeout
        self._endpoint = _errors.Endpoint(
            name=name, api_base=self.api_base, timeout=timeout, kind="openai"
        )
        self._clients: LoopBoundClient[AsyncOpenAI] = LoopBoundClient(self._new_client)

    def _new_client(self) -> AsyncOpenAI:
        import openai  # deferred: costs over a second at start-up

        return openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.api_base,
            timeout=self._timeout,
            max_retries=0,  # retries are RetryingProvider's job
            default_headers=self._extra_headers or None,
            http_client=http_client(openai),
        )

    async def aclose(self) -> None:
        """Close the pooled HTTP connections (optional; they are also closed at exit)."""
        await self._clients.aclose()

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "messages": _nonnull_content(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        params[self._max_tokens_key] = request.max_tokens
        if request.tools:
            params["tools"] = request.tools
            params["tool_choice"] = request.tool_choice
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.stop:
            params["stop"] = list(request.stop)
        return params

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        client = self._clients.get()
        try:
            chunks = await client.chat.completions.create(**sent_as_is(self._params(request)))
        except asyncio.CancelledError:
            self._clients.discard(client)
            raise
        except Exception as exc:
            raise self._translate(exc, streaming=False) from exc
        state = _StreamState()
        try:
            async for chunk in chunks:
                for event in state.feed(chunk):
                    yield event
        except ProviderError:
            raise
        except (asyncio.CancelledError, GeneratorExit):
            self._clients.discard(client)
            raise
        except Exception as exc:
            raise self._translate(exc, streaming=True) from exc
        finally:
            await _close_quietly(chunks)
        if state.finish is None:
            raise _errors.interrupted(self._endpoint, "no finish reason")
        for event in state.flush_calls():
            yield event
        if state.usage is not None:
            yield state.usage
        yield Finish(state.reason())

    def _translate(self, exc: Exception, *, streaming: bool) -> ProviderError:
        return translate_openai_error(self._endpoint, exc, streaming=streaming)


def _nonnull_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with ``content: ""`` where an assistant message carrying tool calls has
    none: llama.cpp's server (and others) reject ``null``, and OpenAI accepts both."""
    if not any(m.get("content") is None and m.get("role") == "assistant" for m in messages):
        return messages
    return [
        {**m, "content": ""} if m.get("content") is None and m.get("role") == "assistant" else m
        for m in messages
    ]


async def _close_quietly(chunks: Any) -> None:
    close = getattr(chunks, "close", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # closing a broken connection may fail again; the first error counts
        pass


def translate_openai_error(
    ep: _errors.Endpoint, exc: BaseException, *, streaming: bool
) -> ProviderError:
    """The :mod:`hippobot.errors` equivalent of an exception from the ``openai`` SDK."""
    import openai

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return _errors.timed_out(ep)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        mapped = _errors.transport_error(ep, cause, streaming=streaming) if cause else None
        return mapped or _errors.unreachable(ep, exc)
    if isinstance(exc, openai.APIResponseValidationError):
        return _errors.malformed(ep, "not the expected shape")
    if isinstance(exc, openai.APIStatusError):
        return _errors.from_status(
            ep, exc.status_code, headers=exc.response.headers, body=_status_body(exc)
        )
    if isinstance(exc, openai.APIError):  # an error event inside a 200 stream
        return _errors.from_status(ep, None, headers=None, body=exc.body or exc.message)
    mapped = _errors.transport_error(ep, exc, streaming=streaming)
    if mapped is not None:
        return mapped
    return _errors.malformed(ep, f"not understood ({type(exc).__name__}: {exc})")


def _status_body(exc: Any) -> object:
    # The SDK keeps only the inner ``error`` object; a body that was not JSON is kept as text.
    body = exc.body
    if body is None:
        try:
            return exc.response.text
        except Exception:
            return exc.message
    return body
