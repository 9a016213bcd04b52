"""Adapter for the Anthropic messages API.

Sessions and prompts are OpenAI-shaped (SPEC 3.1), so this module converts a request on
the way out (:func:`to_anthropic`, a pure function) and folds Anthropic's stream events
into the same typed events as every other provider. The ``anthropic`` SDK is imported only
when the first request is made (importing it costs about three seconds).

Prompt caching: the system block and the last block of the last message carry
``cache_control: ephemeral``, so the stable prefix (tools, system prompt, replayed history)
is read from cache on the next turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hippobot.errors import ProviderError
from hippobot.messages import content_text
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
    from anthropic import AsyncAnthropic

__all__ = ["DEFAULT_ANTHROPIC_BASE", "AnthropicProvider", "to_anthropic"]

DEFAULT_ANTHROPIC_BASE = "https://api.anthropic.com"
_CACHE = {"type": "ephemeral"}
_PLACEHOLDER_KEY = "no-key"

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
        if usage is None:
            return
        for attr, name in (
            ("input_tokens", "input_tokens"),
            ("cache_read", "cache_read_input_tokens"),
            ("cache_creation", "cache_creation_input_tokens"),
            ("output_tokens", "output_tokens"),
        ):
            value = getattr(usage, name, None)
            if value is not None:
                setattr(self, attr, int(value))

    def feed(self, event: Any) -> Iterator[StreamEvent]:
        kind = getattr(event, "type", "")
        if kind == "message_start":
            self._take_usage(getattr(event.message, "usage", None))
        elif kind == "content_block_start":
            block = event.content_block
            if getattr(block, "type", "") == "tool_use":
                initial = json.dumps(block.input) if getattr(block, "input", None) else ""
                self.tools[event.index] = _ToolBlock(block.id, block.name, initial)
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                yield TextDelta(delta.text)
            elif delta.type == "input_json_delta" and event.index in self.tools:
                self.tools[event.index].fragments.append(delta.partial_json)
        elif kind == "content_block_stop":
            tool = self.tools.pop(event.index, None)
            if tool is not None:
                arguments = "".join(tool.fragments) or tool.initial or "{}"
                yield ToolCallEvent(tool.id, tool.name, arguments)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._take_usage(getattr(event, "usage", None))

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
        # The SDK appends /v1/messages; people often paste a base ending in /v1.
        self.api_base = base.removesuffix("/v1")
        self._api_key = api_key or _PLACEHOLDER_KEY
        self._extra_headers = dict(extra_headers or {})
        self._timeout = timeout
        self._endpoint = _errors.Endpoint(
            name=name, api_base=self.api_base, timeout=timeout, kind="anthropic"
        )
        self._clients: LoopBoundClient[AsyncAnthropic] = LoopBoundClient(self._new_client)

    def _new_client(self) -> AsyncAnthropic:
        import anthropic  # deferred: costs about three seconds at start-up

        return anthropic.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self.api_base,
            timeout=self._timeout,
            max_retries=0,  # retries are RetryingProvider's job
            default_headers=self._extra_headers or None,
            http_client=http_client(anthropic),
        )

    async def aclose(self) -> None:
        """Close the pooled HTTP connections (optional)."""
        await self._clients.aclose()

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        client = self._clients.get()
        try:
            events = await client.messages.create(**sent_as_is(to_anthropic(request)), stream=True)
        except asyncio.CancelledError:
            self._clients.discard(client)
            raise
        except Exception as exc:
            raise translate_anthropic_error(self._endpoint, exc, streaming=False) from exc
        state = _StreamState()
        try:
            async for event in events:
                for out in state.feed(event):
                    yield out
        except ProviderError:
            raise
        except (asyncio.CancelledError, GeneratorExit):
            self._clients.discard(client)
            raise
        except Exception as exc:
            raise translate_anthropic_error(self._endpoint, exc, streaming=True) from exc
        finally:
            try:
                await events.close()
            except Exception:  # a broken connection may fail to close; the first error counts
                pass
        if state.stop_reason is None:
            raise _errors.interrupted(self._endpoint, "no stop reason")
        yield state.usage()
        yield Finish(_STOP.get(state.stop_reason, "stop"))


def translate_anthropic_error(
    ep: _errors.Endpoint, exc: BaseException, *, streaming: bool
) -> ProviderError:
    """The :mod:`hippobot.errors` equivalent of an exception from the ``anthropic`` SDK."""
    import anthropic

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, anthropic.APITimeoutError):
        return _errors.timed_out(ep)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        mapped = _errors.transport_error(ep, cause, streaming=streaming) if cause else None
        return mapped or _errors.unreachable(ep, exc)
    if isinstance(exc, anthropic.APIResponseValidationError):
        return _errors.malformed(ep, "not the expected shape")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code if exc.status_code >= 400 else None  # error event in a stream
        return _errors.from_status(ep, status, headers=exc.response.headers, body=exc.body)
    if isinstance(exc, anthropic.APIError):
        return _errors.from_status(ep, None, headers=None, body=exc.body or exc.message)
    mapped = _errors.transport_error(ep, exc, streaming=streaming)
    if mapped is not None:
        return mapped
    return _errors.malformed(ep, f"not understood ({type(exc).__name__}: {exc})")
