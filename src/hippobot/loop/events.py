"""What a turn reports to whoever shows it (terminal, HTTP stream, tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "AgentEvent",
    "EventSink",
    "ModelRetry",
    "ModelWaiting",
    "Notice",
    "Remembered",
    "ReplyDelta",
    "ReplyDone",
    "ReplyRestart",
    "ToolFinished",
    "ToolStarted",
]


@dataclass(frozen=True, slots=True)
class ReplyDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReplyDone:
    """The turn's final reply, sent once the session holds it on disk and before the work
    that follows a turn (versioning memory edits, background jobs): a front end can show it
    at once, and a process killed after showing it has lost nothing."""

    text: str


@dataclass(frozen=True, slots=True)
class ReplyRestart:
    """The model call was retried after a partial reply: discard what was shown."""

    reason: str


@dataclass(frozen=True, slots=True)
class ToolStarted:
    name: str
    summary: str  # one short line describing the call


@dataclass(frozen=True, slots=True)
class ToolFinished:
    name: str
    ok: bool
    summary: str


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should know that is not part of the reply (retry, warning)."""

    text: str
    level: str = "info"


@dataclass(frozen=True, slots=True)
class ModelWaiting:
    """The turn now waits on the model ``model`` with a prompt of about ``prompt_tokens``
    tokens (0: not counted); with ``behind``, the request is not sent yet: it waits for the
    one of this hippobot home that is using the endpoint (``"Dream"``, ``"a chat"``...).
    Sent again when that changes; the first reply text or tool step ends the wait."""

    model: str
    prompt_tokens: int = 0
    behind: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRetry:
    """The model request failed with ``reason`` and is sent again in ``wait`` seconds, as
    attempt ``attempt`` of at most ``attempts``."""

    attempt: int
    attempts: int
    wait: float
    reason: str


@dataclass(frozen=True, slots=True)
class Remembered:
    """hippobot kept what the user asked it to remember (the model wrote no memory): one
    line for the user, shown like a tool step, after the reply."""

    text: str


AgentEvent = (
    ReplyDelta
    | ReplyDone
    | ReplyRestart
    | ToolStarted
    | ToolFinished
    | Notice
    | ModelWaiting
    | ModelRetry
    | Remembered
)
EventSink = Callable[[AgentEvent], None]
