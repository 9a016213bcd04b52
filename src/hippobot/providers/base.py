"""The provider protocol: one streaming call, typed events, one fold into a response.

Every vendor adapter implements :meth:`Provider.stream`; :func:`collect` folds the same
stream into a :class:`ChatResponse`, so there is exactly one parser per wire format.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from hippobot.messages import ToolCall

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "Finish",
    "Progress",
    "Provider",
    "Queued",
    "Restart",
    "Retrying",
    "Started",
    "StreamEvent",
    "TextDelta",
    "ToolCallEvent",
    "Usage",
    "collect",
]

FinishReason = Literal["stop", "tool_calls", "length", "error", "content_filter"]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """Everything a model call needs. ``messages`` are wire messages (system first)."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI function schemas
    tool_choice: Literal["auto", "none"] = "auto"
    max_tokens: int = 4096
    temperature: float | None = None
    stop: tuple[str, ...] = ()  # stop sequences (a client of ``hippobot serve`` may send some)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A complete tool call (adapters assemble streamed argument fragments first)."""

    id: str
    name: str
    arguments: str  # raw JSON text; may be invalid JSON, the loop reports that to the model


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason = "stop"


@dataclass(frozen=True, slots=True)
class Restart:
    """Emitted by the retry policy when a stream failed part-way and is being retried:
    consumers must discard the text and tool calls received so far."""

    attempt: int
    error: str


@dataclass(frozen=True, slots=True)
class Queued:
    """The request waits for another request of this hippobot home to the same endpoint
    (one at a time; :mod:`hippobot.providers.serial`); ``behind`` names that one's work
    ("Dream", "consolidation", "a chat"). Nothing was sent yet."""

    behind: str


@dataclass(frozen=True, slots=True)
class Started:
    """A :class:`Queued` request's turn came: it is being sent now."""


@dataclass(frozen=True, slots=True)
class Retrying:
    """The retry policy sends the request again in ``wait`` seconds, as attempt ``attempt``
    (of at most ``attempts``), because of ``reason`` (the failed attempt's error)."""

    attempt: int
    attempts: int
    wait: float
    reason: str


StreamEvent = TextDelta | ToolCallEvent | Usage | Finish | Restart | Queued | Started | Retrying
#: Events that say where a request is, not what the model said: ``collect`` skips them.
Progress = Queued | Started | Retrying


@dataclass(slots=True)
class ChatResponse:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: FinishReason = "stop"


@runtime_checkable
class Provider(Protocol):
    """A model endpoint. Implementations raise :class:`hippobot.errors.ProviderError`
    subclasses, never vendor SDK exceptions."""

    name: str

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]: ...


async def collect(
    events: AsyncIterator[StreamEvent], on_event: Callable[[StreamEvent], None] | None = None
) -> ChatResponse:
    """Fold a stream of events into one response (honouring :class:`Restart`)."""
    resp = ChatResponse()
    text: list[str] = []
    async for ev in events:
        if on_event is not None:
            on_event(ev)
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        elif isinstance(ev, ToolCallEvent):
            resp.tool_calls.append(
                {"id": ev.id, "type": "function", "function": {"name": ev.name, "arguments": ev.arguments}}
            )
        elif isinstance(ev, Usage):
            resp.usage = ev
        elif isinstance(ev, Finish):
            resp.finish_reason = ev.reason
        elif isinstance(ev, Restart):
            text.clear()
            resp.tool_calls.clear()
    resp.text = "".join(text)
    if resp.tool_calls and resp.finish_reason == "stop":
        resp.finish_reason = "tool_calls"
    return resp
