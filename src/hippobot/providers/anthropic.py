"""Adapter for the Anthropic messages API.

Sessions and prompts are OpenAI-shaped (SPEC 3.1), so this module converts a request on
the way out (:func:`to_anthropic`, a pure function) and folds Anthropic's stream events
into the same typed events as every other provider. The wire protocol (a streamed
``POST /v1/messages``) is spoken here directly over :mod:`._http`; no SDK is involved.

Prompt caching: the system block and the last block of the last message carry
``cache_control: ephemeral``, so the stable prefix (tools, system prompt, replayed history)
is read from cache on the next turn.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hippobot.messages import content_text
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

__all__ = ["DEFAULT_ANTHROPIC_BASE", "AnthropicProvider", "to_anthropic"]

DEFAULT_ANTHROPIC_BASE = "https://api.anthropic.com"
_CACHE = {"type": "ephemeral"}
_PLACEHOLDER_KEY = "no-key"
API_VERSION = "2023-06-01"  # the messages API's version header; prompt caching is GA in it

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


# --- request conversion (pure) ---------------------------------------------------------


def _image_block(url: str) -> dict[str, Any]:
    if url.startswith("data:") and "," in url:
        header, data = url.split(",", 1)
        media_type = header[5:].split(";", 1)[0] or "image/png"
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """OpenAI content (string or parts) as Anthropic blocks; empty text is dropped
    because the API rejects empty text blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url", "")
            if url:
                blocks.append(_image_block(url))
    return blocks


def _tool_input(arguments: str) -> dict[str, Any]:
    # Anthropic needs an object; a model's earlier invalid JSON is kept visible to it.
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


def _assistant_blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = _content_blocks(msg.get("content"))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", {})
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": fn.get("name", ""),
                "input": _tool_input(fn.get("arguments", "")),
            }
        )
    return blocks


def _tool_result(msg: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.get("tool_call_id", "")}
    content = msg.get("content")
    if isinstance(content, list):
        block["content"] = _content_blocks(content)
    elif content:
        block["content"] = str(content)
    return block


def _convert_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, Anthropic messages). Consecutive same-role messages are merged, so
    several tool results become one user message, followed by any user text."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def append(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for msg in messages:
        role = msg.get("role")
        if role == "system":
            text = content_text(msg.get("content"))
            if text:
                system.append(text)
        elif role == "tool":
            append("user", [_tool_result(msg)])
        elif role == "assistant":
            append("assistant", _assistant_blocks(msg))
        else:
            append("user", _content_blocks(msg.get("content")))
    return "\n\n".join(system), out


def to_anthropic(request: ChatRequest) -> dict[str, Any]:
    """The messages-API parameters for ``request`` (without ``stream``)."""
    system, messages = _convert_messages(request.messages)
    if messages:
        messages[-1]["content"][-1]["cache_control"] = dict(_CACHE)
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system:
        params["system"] = [{"type": "text", "text": system, "cache_control": dict(_CACHE)}]
    if request.tools:
        params["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters")
                or {"type": "object", "properties": {}},
            }
            for t in request.tools
        ]
        params["tool_choice"] = {"type": request.tool_choice}
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    return params


# --- stream folding ------------------------------------------------------------------


@dataclass(slots=True)
class _ToolBlock:
    id: str
    name: str
    initial: str  # input from content_block_start, used when no deltas follow
    fragments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamState:
    tools: dict[int, _ToolBlock] = field(default_factory=dict)
    input_tokens: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None

    def _take_usage(self, usage: Any) -> None:
        if not isinstance(usage, Mapping):
            return
        for attr, name in (
            ("input_tokens", "input_tokens"),
            ("cache_read", "cache_read_input_tokens"),
            ("cache_creation", "cache_creation_input_tokens"),
            ("output_tokens", "output_tokens"),
        ):
            value = usage.get(name)
            if isinstance(value, int | float):
                setattr(self, attr, int(value))

    def feed(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        kind = event.get("type", "")
        index = event.get("index")
        if kind == "message_start":
            message = event.get("message")
            self._take_usage(message.get("usage") if isinstance(message, Mapping) else None)
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, Mapping) and block.get("type") == "tool_use" and isinstance(index, int):
                initial = json.dumps(block["input"]) if block.get("input") else ""
                self.tools[index] = _ToolBlock(str(block.get("id", "")), str(block.get("name", "")), initial)
        elif kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, Mapping):
                return
            if delta.get("type") == "text_delta" and delta.get("text"):
                yield TextDelta(str(delta["text"]))
            elif delta.get("type") == "input_json_delta" and index in self.tools:
                self.tools[index].fragments.append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop":
            tool = self.tools.pop(index, None) if isinstance(index, int) else None
            if tool is not None:
                arguments = "".join(tool.fragments) or tool.initial or "{}"
                yield ToolCallEvent(tool.id, tool.name, arguments)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping) and delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            self._take_usage(event.get("usage"))

    def usage(self) -> Usage:
        prompt = self.input_tokens + self.cache_read + self.cache_creation
        return Usage(prompt, self.output_tokens, self.cache_read)


class AnthropicProvider:
    """A :class:`~hippobot.providers.base.Provider` for the Anthropic messages API."""

    def __init__(
        self,
        *,
        api_key: str,
        api_base: str | None = None,
        extra_headers: dict[str, str] | None = None,
        timeout: float = 120.0,
        name: str = "anthropic",
    ) -> None:
        self.name = name
        base = (api_base or DEFAULT_ANTHROPIC_BASE).rstrip("/")
        # Requests go to <base>/v1/messages; people often paste a base ending in /v1.
        self.api_base = base.removesuffix("/v1")
        self._headers = {"x-api-key": api_key or _PLACEHOLDER_KEY, "anthropic-version": API_VERSION,
                         **{k.lower(): v for k, v in (extra_headers or {}).items()}}
        self._endpoint = _errors.Endpoint(
            name=name, api_base=self.api_base, timeout=timeout, kind="anthropic"
        )

    async def aclose(self) -> None:
        """Let go of the shared HTTP client (closed once no provider uses it)."""
        await _http.release(self)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        ep = self._endpoint
        state = _StreamState()
        body = {**to_anthropic(request), "stream": True}
        async with _http.open_stream(ep, "/v1/messages", body, headers=self._headers, user=self) as events:
            async for sse in events:
                if sse.event == "ping":
                    continue
                event = _http.decode(ep, sse.data)
                if not isinstance(event, Mapping):
                    raise _errors.malformed(ep, "not the expected shape")
                if sse.event == "error" or event.get("type") == "error":  # e.g. overloaded mid-stream
                    raise _errors.from_status(ep, None, headers=None, body=event)
                for out in state.feed(event):
                    yield out
        if state.stop_reason is None:
            raise _errors.interrupted(self._endpoint, "no stop reason")
        yield state.usage()
        yield Finish(_STOP.get(state.stop_reason, "stop"))
