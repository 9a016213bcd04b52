"""Adapter for OpenAI-compatible chat-completions endpoints.

One class serves OpenAI, OpenRouter, DeepSeek, vLLM, Ollama and llama.cpp: they differ by
base URL and a few quirks, which are data here, not subclasses. The wire protocol (a
streamed ``POST /chat/completions``) is spoken here directly over :mod:`._http`; no SDK is
involved, so nothing heavy is imported before the request goes out.

Invariants of :meth:`OpenAICompatProvider.stream`:

* events come in the order ``TextDelta* ToolCallEvent* Usage? Finish``;
* a tool call is yielded once, complete, with its argument fragments joined verbatim
  (invalid JSON is passed through; the agent loop reports it to the model);
* a stream that ends without a finish reason raises ``StreamInterruptedError``;
* only :class:`hippobot.errors.ProviderError` subclasses escape, never HTTP-library ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from hippobot.providers import _errors, _http
from hippobot.providers.base import (
    ChatRequest,
    Finish,
    FinishReason,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)

__all__ = ["DEFAULT_OPENAI_BASE", "OpenAICompatProvider"]

DEFAULT_OPENAI_BASE = "https://api.openai.com/v1"

# OpenAI's own API rejects ``max_tokens`` for its reasoning models; compatible servers
# (Ollama, llama.cpp, older vLLM) only know ``max_tokens`` and silently ignore the new key,
# so a local model would generate until its context is full. Decided by where the requests
# go, not by the provider's name: "openai" pointed at a local server is a local server.
_USES_MAX_COMPLETION_TOKENS = frozenset({"api.openai.com"})
# Local servers accept any key; some proxies in front of them insist on the header.
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
    """Folds chat-completion chunks (parsed JSON) into events; knows nothing about HTTP."""

    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage | None = None
    calls_sent: bool = False

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.usage = _usage(usage)
        for choice in _list(chunk.get("choices")):
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                content = delta.get("content")
                if isinstance(content, str) and content:
                    yield TextDelta(content)
                for position, tc in enumerate(_list(delta.get("tool_calls"))):
                    self._add_fragment(tc, position)
            finish = choice.get("finish_reason")
            if finish:
                self.finish = str(finish)
                yield from self.flush_calls()

    def _add_fragment(self, tc: Mapping[str, Any], position: int) -> None:
        index = tc.get("index")
        call = self.calls.setdefault(index if isinstance(index, int) else position, _PartialCall())
        if tc.get("id"):
            call.id = str(tc["id"])
        fn = tc.get("function")
        if isinstance(fn, Mapping):
            if fn.get("name"):
                call.name = str(fn["name"])
            if isinstance(fn.get("arguments"), str) and fn["arguments"]:
                call.arguments.append(fn["arguments"])

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


def _list(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON array (anything else: none), so a sloppy server cannot crash us."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _usage(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if cached is None:  # DeepSeek reports cache hits in its own field
        cached = usage.get("prompt_cache_hit_tokens")
    return Usage(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=_int(cached),
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
        self._headers = {"authorization": f"Bearer {api_key or _PLACEHOLDER_KEY}",
                         **{k.lower(): v for k, v in (extra_headers or {}).items()}}
        self._endpoint = _errors.Endpoint(
            name=name, api_base=self.api_base, timeout=timeout, kind="openai"
        )

    async def aclose(self) -> None:
        """Let go of the shared HTTP client (closed once no provider uses it)."""
        await _http.release(self)

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
        ep = self._endpoint
        state = _StreamState()
        async with _http.open_stream(
            ep, "/chat/completions", self._params(request), headers=self._headers, user=self
        ) as events:
            done = False
            async for sse in events:  # read to the end, so the connection can be reused
                if done or sse.data.strip() == "[DONE]":
                    done = True
                    continue
                chunk = _http.decode(ep, sse.data)
                if not isinstance(chunk, Mapping):
                    raise _errors.malformed(ep, "not the expected shape")
                if chunk.get("error"):  # an error event inside a 200 stream
                    raise _errors.from_status(ep, None, headers=None, body=chunk)
                for event in state.feed(chunk):
                    yield event
        if state.finish is None:
            raise _errors.interrupted(ep, "no finish reason")
        for event in state.flush_calls():
            yield event
        if state.usage is not None:
            yield state.usage
        yield Finish(state.reason())


def _nonnull_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with ``content: ""`` where an assistant message carrying tool calls has
    none: llama.cpp's server (and others) reject ``null``, and OpenAI accepts both."""
    if not any(m.get("content") is None and m.get("role") == "assistant" for m in messages):
        return messages
    return [
        {**m, "content": ""} if m.get("content") is None and m.get("role") == "assistant" else m
        for m in messages
    ]
