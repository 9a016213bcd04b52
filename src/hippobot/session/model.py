"""The session as pure data: messages, pointers and the history-replay rule. No I/O here.

A :class:`Session` is the in-memory mirror of one ``sessions/<channel>/<chat>.jsonl``
file. Its ``messages`` only ever grow (consolidation moves ``last_consolidated``, it does
not delete), so a message's index is stable and ``last_consolidated`` is simply "how many
leading messages are archived in ``memory/history.jsonl``".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hippobot.messages import Message, public_text

__all__ = [
    "MESSAGE_ROLES",
    "SYNTHETIC_TOOL_RESULT",
    "SYNTHETIC_TURN_START",
    "ArchiveFailure",
    "ArchiveWait",
    "ArchivedSummary",
    "Session",
    "SessionUsage",
    "is_message",
    "normalise_offset",
    "now_iso",
]

MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})
SYNTHETIC_TOOL_RESULT = "[no result: the turn was interrupted before this tool finished]"
# A replay must open with a user message (Anthropic rejects anything else). When the archive
# cut a long tool-using turn at an assistant boundary, the turn's own question is already in
# memory; this stands in for it so the rest of the turn can still be replayed.
SYNTHETIC_TURN_START = "[the start of this turn is not shown (archived to memory); continue from here]"


def now_iso() -> str:
    """The current time as an ISO string with the local UTC offset."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def is_message(value: object) -> bool:
    """True for a dict that can be stored and replayed as a chat message."""
    if not (
        isinstance(value, dict)
        and "_type" not in value
        and isinstance(value.get("role"), str)
        and value["role"] in MESSAGE_ROLES
    ):
        return False
    # A content no endpoint accepts would be replayed in every later request and wedge the
    # session, so such a line is treated as corrupt (quarantined) rather than as a message.
    content = value.get("content")
    if not (content is None or isinstance(content, str)
            or (isinstance(content, list) and all(isinstance(b, dict) for b in content))):
        return False
    # The same for tool calls and their results: a malformed one would be sent back to the
    # provider on every turn, which refuses the whole request.
    if "tool_calls" in value and not _well_formed_calls(value["tool_calls"]):
        return False
    return "tool_call_id" not in value or isinstance(value["tool_call_id"], str)


def _well_formed_calls(calls: object) -> bool:
    if calls is None:
        return True
    if not isinstance(calls, list):
        return False
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(function, dict) and isinstance(call.get("id"), str)
                and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments", ""), str | dict)):
            return False
    return True


def normalise_offset(value: object, message_count: int) -> int:
    """A usable ``last_consolidated``: anything odd becomes 0 so no history is ever hidden."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    if value < 0 or value > message_count:
        return 0
    return value


@dataclass
class ArchivedSummary:
    """What idle compaction archived, shown in the prompt until the session moves on."""

    text: str
    last_active: str


def _count(value: object) -> int | None:
    """A non-negative int, else ``None`` (``true`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """The provider-reported usage of the last request on a session.

    ``messages_at`` is the message count when it was measured and ``replay_start`` where
    that request's replay began, so a size estimate only has to count what came after
    (and knows when the report no longer describes the replay). Stored in the meta record
    as ``"usage": {...}`` with these keys; nanobot's sessions carry only the first three.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    messages_at: int | None = None
    replay_start: int | None = None

    def to_dict(self) -> dict[str, int]:
        out = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
        }
        if self.messages_at is not None:
            out["messages_at"] = self.messages_at
        if self.replay_start is not None:
            out["replay_start"] = self.replay_start
        return out

    @classmethod
    def from_dict(cls, data: object) -> SessionUsage | None:
        """The usage a stored record describes; ``None`` when it is not an object. Fields
        that are not non-negative ints are dropped (a token count defaults to 0)."""
        if not isinstance(data, dict):
            return None
        return cls(
            prompt_tokens=_count(data.get("prompt_tokens")) or 0,
            completion_tokens=_count(data.get("completion_tokens")) or 0,
            cached_tokens=_count(data.get("cached_tokens")) or 0,
            messages_at=_count(data.get("messages_at")),
            replay_start=_count(data.get("replay_start")),
        )


@dataclass(frozen=True, slots=True)
class ArchiveFailure:
    """A consolidation of messages ``[last_consolidated, end)`` that failed and is retried.

    Kept in the session's meta record (``metadata["archive_failed"]``), so every process and
    every report reads the same state; cleared when the pointer passes ``end``. ``kind`` is
    what asked for the archive (``new``, ``pressure``, ``idle``); times are ISO strings.
    """

    end: int
    reason: str
    attempts: int = 1
    first_failed: str = ""
    last_failed: str = ""
    kind: str = "pressure"

    def to_dict(self) -> dict[str, Any]:
        return {"end": self.end, "reason": self.reason, "attempts": self.attempts,
                "first_failed": self.first_failed, "last_failed": self.last_failed,
                "kind": self.kind}

    @classmethod
    def from_dict(cls, data: object) -> ArchiveFailure | None:
        """The record a meta line holds; ``None`` when it is missing or not usable."""
        if not isinstance(data, dict) or _count(data.get("end")) is None:
            return None
        text: dict[str, str] = {}
        for name in ("reason", "first_failed", "last_failed", "kind"):
            value = data.get(name)
            text[name] = value if isinstance(value, str) else ""
        return cls(
            end=data["end"], reason=text["reason"] or "the archive request failed",
            attempts=max(1, _count(data.get("attempts")) or 1),
            first_failed=text["first_failed"], last_failed=text["last_failed"],
            kind=text["kind"] or "pressure",
        )


@dataclass(frozen=True, slots=True)
class ArchiveWait:
    """Messages ``[start, end)`` of a session that must reach the archive and have not yet:
    the part before a ``/new`` whose archive did not finish, or a consolidation that failed."""

    session: str
    start: int
    end: int
    reason: str
    attempts: int = 0  # failed attempts so far (0: interrupted or not tried yet)

    @property
    def count(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return f"{self.count} messages of session {self.session} waiting to be archived: {self.reason}"


ARCHIVE_FAILED = "archive_failed"  # the metadata key of :class:`ArchiveFailure`


@dataclass(eq=False)
class Session:
    """One conversation. Identity semantics: one object per key while it is in use.

    ``usage`` is the provider-reported usage of the last request (:class:`SessionUsage`).
    ``metadata`` is free-form and persisted as is; hippobot's own keys in it are
    ``fresh_start`` and ``archive_failed`` (read and written through :attr:`fresh_start` and
    :attr:`archive_failure`).
    """

    key: str
    messages: list[Message] = field(default_factory=list)
    created_at: str = field(default_factory=now_iso)
    updated_at: str = ""
    last_consolidated: int = 0
    summary: ArchivedSummary | None = None
    usage: SessionUsage | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.updated_at:
            self.updated_at = self.created_at
        if not isinstance(self.metadata, dict):
            self.metadata = {}
        self.last_consolidated = normalise_offset(self.last_consolidated, len(self.messages))

    def add(self, message: Message) -> Message:
        """Append a copy of ``message`` (timestamped if it has none) and return the copy."""
        stored: Message = dict(message)  # type: ignore[assignment]
        now = now_iso()
        if not stored.get("timestamp"):
            stored["timestamp"] = now
        self.messages.append(stored)
        self.updated_at = now
        return stored

    @property
    def fresh_start(self) -> int:
        """Where the last ``/new`` started the conversation afresh (0: never); anything
        stored there that is not a non-negative int counts as 0."""
        return _count(self.metadata.get("fresh_start", 0)) or 0

    @fresh_start.setter
    def fresh_start(self, index: int) -> None:
        self.metadata["fresh_start"] = index

    @property
    def archive_failure(self) -> ArchiveFailure | None:
        """The consolidation that failed and waits for a retry, if any."""
        return ArchiveFailure.from_dict(self.metadata.get(ARCHIVE_FAILED))

    @archive_failure.setter
    def archive_failure(self, failure: ArchiveFailure | None) -> None:
        if failure is None:
            self.metadata.pop(ARCHIVE_FAILED, None)
        else:
            self.metadata[ARCHIVE_FAILED] = failure.to_dict()

    def archive_wait(self) -> ArchiveWait | None:
        """What must still be archived (``None``: nothing waits). The one answer ``status``,
        ``memory history --pending``, ``sessions list`` and the retries all read."""
        total = len(self.messages)
        start = self.last_consolidated
        failure = self.archive_failure
        end = min(self.fresh_start, total)
        if failure is not None:
            end = max(end, min(failure.end, total))
        if end <= start:
            return None
        if failure is not None and failure.end > start:
            when = failure.last_failed[:16].replace("T", " ")
            tries = f"{failure.attempts} failed attempt{'s' if failure.attempts != 1 else ''}"
            return ArchiveWait(self.key, start, end,
                               f"{failure.reason} ({tries}, last {when}; `hippobot dream` retries now)",
                               failure.attempts)
        return ArchiveWait(self.key, start, end,
                           "the archive after /new has not finished (interrupted, or still "
                           "running); the next run retries it")

    def unanswered(self, candidate: Message) -> Message | None:
        """The stored user message of a turn that ended without a reply (failed, cut off,
        killed) when ``candidate`` repeats it (same text without the runtime context, same
        images): a re-sent message is answered from that copy instead of being stored twice."""
        for index in range(len(self.messages) - 1, self.replay_start - 1, -1):
            message = self.messages[index]
            role = message.get("role")
            if role == "assistant" and not message.get("tool_calls"):
                return None  # the last turn was answered
            if role == "user" and not message.get("_command"):
                same = public_text(message).strip() == public_text(candidate).strip()
                return message if same and message.get("media") == candidate.get("media") else None
        return None

    @property
    def replay_start(self) -> int:
        """First message that may be replayed: past the archived prefix and past ``/new``."""
        return min(max(self.last_consolidated, self.fresh_start), len(self.messages))

    def unconsolidated(self) -> list[Message]:
        """The messages not yet archived (a new list; the dicts are the stored ones)."""
        return self.messages[normalise_offset(self.last_consolidated, len(self.messages)) :]

    def get_history(
        self,
        *,
        max_messages: int = 0,
        max_tokens: int = 0,
        count_tokens: Callable[[Message], int] | None = None,
    ) -> list[Message]:
        """The messages to replay to the model, legal for every provider.

        Steps: messages after ``last_consolidated`` without ``_command`` echoes; the newest
        ``max_messages`` if > 0; the newest that fit ``max_tokens`` if > 0, counted by
        ``count_tokens`` (default: :func:`hippobot.context.tokens.count_message`; if that leaves no
        user message but the window had one, it extends back to the latest user message,
        because a reply without its question misleads the model); then it starts at the
        first user message, if there is one.

        Invariant of the result: every ``tool`` message directly follows (within a run of
        tool messages) the assistant message whose ``tool_calls`` declare its id, at most
        one result per id; every declared tool call has a result (a turn killed mid-way
        gets :data:`SYNTHETIC_TOOL_RESULT`, placed after that call's real results). The
        returned dicts are the stored ones (synthetic results are new dicts) and
        ``self.messages`` is never modified. An empty session gives ``[]``. A non-empty result
        opens with a user message: when the window holds none (the archive cut a long turn at
        an assistant boundary), the note :data:`SYNTHETIC_TURN_START` comes first.
        """
        window = [m for m in self.messages[self.replay_start :] if not m.get("_command")]
        if max_messages > 0:
            window = window[-max_messages:]
        if max_tokens > 0:
            window = _fit_tokens(window, max_tokens, count_tokens or _count_message)
        for index, message in enumerate(window):
            if message.get("role") == "user":
                window = window[index:]
                break
        legal = _make_legal(window)
        if legal and legal[0].get("role") != "user":
            legal.insert(0, {"role": "user", "content": SYNTHETIC_TURN_START})
        return legal


def _count_message(message: Message) -> int:
    """The one token count (:mod:`hippobot.context.tokens`; offline when its tables are)."""
    from hippobot.context.tokens import count_message

    return count_message(message)


def _fit_tokens(
    window: list[Message], budget: int, count: Callable[[Message], int]
) -> list[Message]:
    """The newest messages whose counts fit ``budget`` (at least one)."""
    start = len(window)
    used = 0
    while start > 0:
        cost = count(window[start - 1])
        if used + cost > budget and start < len(window):
            break
        used += cost
        start -= 1
    kept = window[start:]
    if not any(m.get("role") == "user" for m in kept):
        users = [i for i, m in enumerate(window[:start]) if m.get("role") == "user"]
        if users:
            kept = window[users[-1] :]
    return kept


def _declared_calls(message: Message) -> dict[str, str]:
    """Tool call id -> function name for an assistant message, in declaration order."""
    calls: dict[str, str] = {}
    tool_calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(tool_calls, list):
        return calls
    for call in tool_calls:
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            function = call.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            calls.setdefault(call["id"], name if isinstance(name, str) else "")
    return calls


def _make_legal(window: list[Message]) -> list[Message]:
    """Drop misplaced tool results and answer unanswered tool calls (see get_history)."""
    out: list[Message] = []
    pending: dict[str, str] = {}

    def close_group() -> None:
        for call_id, name in pending.items():
            synthetic: Message = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": SYNTHETIC_TOOL_RESULT,
            }
            if name:
                synthetic["name"] = name
            out.append(synthetic)
        pending.clear()

    for message in window:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id in pending:
                del pending[call_id]
                out.append(message)
            continue  # orphan, duplicate or separated from its call: not legal on the wire
        close_group()
        out.append(message)
        pending.update(_declared_calls(message))
    close_group()
    return out
