"""The prompt pipeline: the one owner of what a request on a session carries.

:meth:`PromptAssembler.prepare` gives the system prompt, the replayed history (capped to
the input budget), the exact wire messages and the tool schemas; :meth:`estimate` gives
the prompt size. A chat turn, the consolidation request that reuses the turn's prefix, and
``/context`` / ``hippobot context`` all call these, so what is shown, what is sent and what
is budgeted cannot differ.
"""

from __future__ import annotations

import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hippobot.context import tokens
from hippobot.context.budget import Budget, usage_estimate
from hippobot.context.builder import ContextBuilder, SystemPrompt
from hippobot.context.recent import RecentEntry, RecentSelection, select_recent_history
from hippobot.context.wire import to_wire
from hippobot.lazy_regex import lazy_compile
from hippobot.memory.history import HistoryEntry
from hippobot.messages import Message, content_text
from hippobot.session.model import Session

if TYPE_CHECKING:
    from hippobot.tools.base import ToolRegistry

__all__ = ["HistorySource", "PreparedRequest", "PromptAssembler", "Shown", "split_key"]

_CACHE_SESSIONS = 128


def split_key(key: str) -> tuple[str, str]:
    """``channel:chat`` → (channel, chat); a key without a colon is its own chat."""
    channel, _, chat = key.partition(":")
    return channel, chat or channel


class HistorySource(Protocol):
    """What the prompt needs from the memory store: the entries Dream has not read yet."""

    def read_history(
        self, *, after: int = 0, session_key: str | None = None, limit: int | None = None
    ) -> Sequence[HistoryEntry]: ...

    def dream_cursor(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """Everything one request on a session sends, in the order it is sent."""

    system: SystemPrompt
    history: list[Message]  # the stored messages replayed (legal for every provider)
    messages: list[dict[str, Any]]  # wire form: [system, *history]
    tools: ToolRegistry
    schemas: list[dict[str, Any]]

    def size(self) -> int:
        """Tokens this request carries, counted (system prompt, tools, replayed messages)."""
        return self.parts().total

    def parts(self) -> tokens.PromptSize:
        """:meth:`size` by part."""
        return tokens.prompt_size(system=self.system.text, tools=self.schemas, messages=self.history)


def memory_anchor(session: Session, recent: Sequence[Any], next_user: str = "") -> str:
    """What memory files over their budget are selected for: the first user message the
    prompt replays and the Recent History shown. Both change only at memory events
    (consolidation, /new, Dream), so the selection and the cached prefix stay put between.
    ``next_user``: the message about to be added, standing in for the first one when the
    replay holds none yet."""
    parts = [str(getattr(e, "content", "")) for e in recent]
    for message in session.messages[session.replay_start :]:
        if message.get("role") == "user":
            parts.insert(0, content_text(message.get("content")))
            break
    else:
        if next_user:
            parts.insert(0, next_user)
    return "\n".join(parts)


_FENCE_MARK = lazy_compile(r"\\(?=[\[#-])")


def _comparable(text: str) -> str:
    """Text as a substring test should see it: NFKC, fences and line breaks ignored."""
    return " ".join(_FENCE_MARK.sub("", unicodedata.normalize("NFKC", text)).split())


@dataclass(frozen=True, slots=True)
class Shown:
    """What a request on a session already shows the model: the system prompt's text
    and the messages of the session it replays (their numbers in the session)."""

    session_key: str
    system_text: str  # comparable form
    replayed: frozenset[int]
    recalled: frozenset[str] = frozenset()  # citations replayed messages carry already
    history: frozenset[int] = frozenset()  # cursors of the entries Recent History shows

    def shows_entry(self, cursor: int) -> bool:
        """Whether Recent History shows history entry ``cursor`` (another chat's entry may
        be shown by its durable lines only: what it holds besides is not worth recalling)."""
        return cursor in self.history

    def recalled_before(self, citation: str) -> bool:
        """Whether a replayed message's runtime context lists ``citation`` already."""
        return citation in self.recalled

    def in_prompt(self, text: str) -> bool:
        """Whether the system prompt holds ``text`` (a search snippet: an excerpt may start
        or end with "…")."""
        needle = _comparable(text.strip().strip("…"))
        return len(needle) >= 8 and needle in self.system_text

    def replays(self, session_key: str | None, number: int) -> bool:
        return session_key == self.session_key and number in self.replayed


class PromptAssembler:
    """Prepares requests for sessions of one workspace.

    Collaborators: ``builder`` (workspace files and skills → system prompt), ``history``
    (the memory store), ``tools_for`` (a session's tool registry), ``model_label`` (the
    model's name for the prompt) and the ``budget``.
    """

    def __init__(
        self,
        *,
        builder: ContextBuilder,
        history: HistorySource,
        tools_for: Callable[[str], ToolRegistry],
        model_label: Callable[[], str],
        budget: Budget,
        max_history_messages: int,
        include_other_sessions: bool = False,
    ) -> None:
        self.builder = builder
        self.history = history
        self.tools_for = tools_for
        self.model_label = model_label
        self.budget = budget
        self.max_history_messages = max_history_messages
        self.include_other_sessions = include_other_sessions
        # Stored messages never change, so each one's wire form is built once and reused
        # while it is replayed (the entry keeps the message alive, so ids are never confused).
        self._wire_cache: OrderedDict[str, dict[int, tuple[Message, dict[str, Any]]]] = (
            OrderedDict()
        )
        self._comparable: tuple[str | None, str] = (None, "")  # last system text, compared form

    @property
    def workspace(self) -> Path:
        return self.builder.files.workspace

    # --- parts ------------------------------------------------------------------------

    def recent_history(self, key: str) -> RecentSelection:
        """What ``# Recent History`` shows in session ``key``: pending archive entries of
        this session and the durable lines of the others' (context.recent)."""
        pending = self.history.read_history(after=self.history.dream_cursor())
        return select_recent_history(
            [RecentEntry(e.cursor, e.timestamp, e.content, e.session_key) for e in pending],
            session_key=key,
            include_other_sessions=self.include_other_sessions,
            max_tokens=self.budget.history_tokens,
        )

    def system_prompt(
        self, session: Session, tool_names: Sequence[str], *, next_user: str = ""
    ) -> SystemPrompt:
        channel, _ = split_key(session.key)
        selection = self.recent_history(session.key)
        return self.builder.build(
            recent_history=selection.entries,
            archived_summary=session.summary.text if session.summary else None,
            tool_names=tuple(tool_names),
            channel=channel,
            model=self.model_label(),
            recent_history_note=selection.note,
            memory_anchor=memory_anchor(session, selection.entries, next_user),
        )

    def shown(self, session: Session, next_user: str = "") -> Shown:
        """What the next request on ``session`` will show besides the message about to be
        added (``next_user``): recall before answering leaves that out. The replay is the
        one :meth:`prepare` would send now; adding the message may push its oldest
        message out, which is then merely not recalled this once."""
        registry = self.tools_for(session.key)
        system = self.system_prompt(session, registry.names(), next_user=next_user)
        entries = frozenset(int(e.cursor) for e in self.recent_history(session.key).entries)
        history = self.replay(session, system, registry.schemas())
        replayed = {id(m) for m in history}
        start = session.replay_start
        numbers = frozenset(
            n for n, m in enumerate(session.messages[start:], start=start) if id(m) in replayed
        )
        recalled = frozenset(
            str(hit.get("citation"))
            for m in history
            if m.get("role") == "user" and isinstance(m.get("_recall"), dict)
            for hit in m["_recall"].get("hits") or ()
            if isinstance(hit, dict)
        )
        if self._comparable[0] is not system.text:  # the memoised prompt: usually the same
            self._comparable = (system.text, _comparable(system.text))
        return Shown(session.key, self._comparable[1], numbers, recalled, entries)

    def replay(
        self, session: Session, system: SystemPrompt, schemas: list[dict[str, Any]]
    ) -> list[Message]:
        """The stored messages replayed this turn, capped to what fits the input budget."""
        max_tokens = 0
        if self.budget.enabled and not self.clearly_fits(session):
            fixed = tokens.prompt_size(system=system.text, tools=schemas).fixed
            max_tokens = max(256, self.budget.input - fixed)
        return session.get_history(
            max_messages=self.max_history_messages,
            max_tokens=max_tokens,
            count_tokens=tokens.count_message if max_tokens else None,
        )

    def surely_replayed_from(self, session: Session) -> int:
        """The first message the next request replays for certain; ``len(messages)`` when
        the token budget may cut the replay (then none is counted on as replayed). Recall
        before answering need not index what the request replays (:meth:`RecallIndex.search`)."""
        total = len(session.messages)
        if self.budget.enabled and not self.clearly_fits(session):
            return total
        start = session.replay_start
        if self.max_history_messages > 0:
            start = max(start, total - self.max_history_messages)
        while start < total and session.messages[start].get("role") != "user":
            start += 1  # the replay opens at a user message: what comes before is left out
        return start

    def in_view_during_turn(self, session: Session) -> int:
        """The first message every request of the session's current turn surely replays:
        :meth:`surely_replayed_from`, and never later than the turn's own user message
        (no budget cuts the message being answered, nor what its tools returned). A tool
        asks this mid-turn; searching for the garden, the local model was shown its own
        question, in a fresh session whose replay could not be counted on yet."""
        start, messages = self.surely_replayed_from(session), session.messages
        for number in range(len(messages) - 1, -1, -1):  # back to the turn's user message
            if messages[number].get("role") == "user":
                return min(start, number)
        return start

    def clearly_fits(self, session: Session) -> bool:
        """True when the last request's reported size plus what came since is far below the
        budget: then the replay needs no token cap and nothing has to be counted exactly
        (which keeps a turn's cost independent of the session's length)."""
        size = usage_estimate(session, count=tokens.estimate_messages)
        return size is not None and size < 0.85 * self.budget.input

    # --- the request ------------------------------------------------------------------

    def prepare(self, session: Session) -> PreparedRequest:
        """The exact request a turn on ``session`` would send now."""
        registry = self.tools_for(session.key)
        schemas = registry.schemas()
        system = self.system_prompt(session, registry.names())
        history = self.replay(session, system, schemas)
        previous = self._wire_cache.pop(session.key, {})
        current: dict[int, tuple[Message, dict[str, Any]]] = {}
        wire: list[dict[str, Any]] = [{"role": "system", "content": system.text}]
        for m in history:
            hit = previous.get(id(m))
            item = hit[1] if hit is not None and hit[0] is m else to_wire(m)
            current[id(m)] = (m, item)
            wire.append(item)
        self._wire_cache[session.key] = current
        while len(self._wire_cache) > _CACHE_SESSIONS:  # a server sees many sessions
            self._wire_cache.popitem(last=False)
        return PreparedRequest(system, history, wire, registry, schemas)

    def left_out(self, session: Session) -> int:
        """How many of the oldest messages not yet archived the next request no longer
        replays (the window cut them): they must reach the archive now."""
        replayed = {id(m) for m in self.prepare(session).history}
        window = [m for m in session.messages[session.replay_start :] if not m.get("_command")]
        return next((i for i, m in enumerate(window) if id(m) in replayed), len(window))

    def estimate(self, session: Session) -> int:
        """Prompt tokens the next request on ``session`` would use: the provider's report on
        the last one plus what came since, or else a count of the whole prompt (the
        unarchived messages, uncapped: this is what consolidation must bring down)."""
        reported = usage_estimate(session)
        if reported is not None:
            return reported
        return self.size_of(session, session.messages[session.replay_start :]).total

    def overhead(self, session: Session) -> int:
        """Tokens of the next request that are not conversation: system prompt + tool schemas."""
        return self.size_of(session).fixed

    def size_of(self, session: Session, messages: Sequence[Message] = ()) -> tokens.PromptSize:
        """The next request's system prompt and tool schemas, with ``messages`` as its
        conversation, counted by the one size function."""
        registry = self.tools_for(session.key)
        system = self.system_prompt(session, registry.names())
        return tokens.prompt_size(system=system.text, tools=registry.schemas(), messages=messages)
