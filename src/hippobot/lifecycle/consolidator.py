"""The Consolidator: archive the oldest unconsolidated slice of a session (SPEC 4.3).

Invariants
- A slice ``[start, end)`` is summarised, the summary is appended to ``history.jsonl`` with
  ``source = {session, from: start, to: end}``, and only then does ``last_consolidated`` move to
  ``end``. A crash between the two is repaired on the next run: an entry whose source ends after
  the pointer fast-forwards it (:meth:`Consolidator.repair`), so a slice is never archived twice
  and never lost.
- The session's turn lock is *not* held during the model call: a background consolidation never
  makes the user wait. A cross-process file lock keeps one consolidation per session.
- So, in the background, an unfinished last turn may be running (here or in another process):
  it is not archived (its tool results would land after the cut and be dropped from every
  replay) and the summary request does not replay it (the replay would show stand-ins for
  results still to come). Under the turn lock (before a turn) such a turn was interrupted.
- The summary request normally shares the previous request's prefix (same system prompt, same
  replay, same tools, ``tool_choice="none"``) with the instruction as the last user message, so
  the provider's prompt cache serves it. When the slice is no longer in the replay (the window
  was capped), the slice is sent as a transcript instead, in chunks that fit, and the chunk
  summaries are merged into one entry.
- When the model fails or answers nothing usable, a bounded ``[RAW]`` entry is written instead
  and the pointer still moves, so a broken model cannot wedge a session.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from hippobot.context import tokens
from hippobot.errors import ProviderError, StorageError
from hippobot.lifecycle.summaries import (
    SAVE_SUMMARY_TOOL,
    SUMMARY_MAX_CHARS,
    ParsedSummary,
    format_transcript,
    parse_summary,
    raw_entry,
    summary_from_tool_call,
)
from hippobot.locks import HeldLock, LockTimeout, acquire_async
from hippobot.memory.history import HistoryEntry, HistorySource
from hippobot.messages import Message, public_text
from hippobot.prompts import render
from hippobot.providers.base import ChatRequest, collect
from hippobot.providers.metering import usage_job
from hippobot.session.model import ArchivedSummary, Session
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.context.assembler import PromptAssembler
    from hippobot.context.budget import Budget
    from hippobot.lifecycle.background import BackgroundJobs
    from hippobot.memory.store import MemoryStore
    from hippobot.providers.model import ModelClient
    from hippobot.session.manager import SessionManager

__all__ = ["Consolidator", "SliceOutcome", "legal_boundaries"]

log = logging.getLogger(__name__)

_MAX_ROUNDS = 6
_SUMMARY_REPLY_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class SliceOutcome:
    start: int
    end: int
    entry: HistoryEntry | None  # None: the model said nothing was worth keeping
    raw: bool = False


def legal_boundaries(messages: list[Message], start: int) -> list[tuple[int, bool]]:
    """Indices ``b`` (start < b <= len) where ``messages[start:b]`` can be archived.

    A cut may not separate tool results from their call, so ``messages[b]`` must not be a tool
    result. Each boundary is flagged ``True`` when it is a user-turn boundary (preferred).
    """
    out: list[tuple[int, bool]] = []
    n = len(messages)
    for b in range(start + 1, n + 1):
        if b == n:
            out.append((b, True))
        elif messages[b].get("role") != "tool":
            out.append((b, messages[b].get("role") == "user"))
    return out


def open_turn_start(messages: list[Message], start: int) -> int | None:
    """Where the last turn begins when it is unfinished (not yet ended by a reply without
    tool calls), else ``None``. Without the session's turn lock, such a turn may be running,
    here or in another process: its tool results are still to come."""
    if len(messages) <= start:
        return None
    last = messages[-1]
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        return None
    for index in range(len(messages) - 1, start - 1, -1):
        if messages[index].get("role") == "user":
            return index
    return start


class Consolidator:
    """Archives sessions of one workspace. Collaborators: the sessions, the memory store,
    the prompt assembler (the same request a turn sends), the model, the budget, the
    background jobs, the workspace's lock names and the redaction of error texts."""

    def __init__(
        self,
        *,
        sessions: SessionManager,
        memory: MemoryStore,
        prompts: PromptAssembler,
        model: ModelClient,
        budget: Budget,
        jobs: BackgroundJobs,
        workspace: Workspace,
        idle_minutes: float = 0,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.sessions = sessions
        self.memory = memory
        self.prompts = prompts
        self.model = model
        self.budget = budget
        self.jobs = jobs
        self.workspace = workspace
        self.idle_minutes = idle_minutes
        self.redact = redact
        # idle locks are garbage-collected, so a server seeing many sessions stays small
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._held: dict[str, HeldLock] = {}

    # --- sizing ---------------------------------------------------------------------

    def estimate(self, session: Session) -> int:
        """Prompt tokens the next request on this session would use (ground truth + delta)."""
        return self.prompts.estimate(session)

    def overhead(self, session: Session) -> int:
        """Tokens of the next request that are not conversation: system prompt + tool schemas."""
        registry = self.prompts.tools_for(session.key)
        system = self.prompts.system_prompt(session, registry.names())
        return tokens.count_text(system.text) + tokens.count_tools(registry.schemas())

    def due(self, session: Session) -> bool:
        """Whether the session's prompt has reached the consolidation trigger."""
        budget = self.budget
        if not budget.enabled:
            return False
        estimate = self.estimate(session)
        if estimate < budget.trigger_for(0):
            return False  # cheap exit: below the trigger whatever the overhead
        return estimate >= budget.trigger_for(self.overhead(session))

    def idle_due(self, session: Session, now: datetime | None = None) -> bool:
        minutes = self.idle_minutes
        if minutes <= 0 or session.replay_start >= len(session.messages):
            return False
        try:
            updated = datetime.fromisoformat(session.updated_at)
        except (TypeError, ValueError):
            return False
        now = now or datetime.now().astimezone()
        if updated.tzinfo is None:
            updated = updated.astimezone()
        return (now - updated).total_seconds() >= minutes * 60

    # --- entry points -----------------------------------------------------------------

    async def consolidate_locked(self, key: str) -> int:
        """Background entry point: consolidate a session by key if it is still over budget."""
        session = await self.sessions.aget(key)
        return await self.consolidate(session, only_if_due=True)

    async def consolidate(
        self, session: Session, *, only_if_due: bool = False, turn_held: bool = False
    ) -> int:
        """Archive oldest slices until the prompt is at the target; returns entries written.

        The target leaves at least half the conversation's room free (agent.budget), so the
        next consolidation is several turns away even in a 4,096-token window. ``turn_held``:
        the caller holds the session's turn lock, so an unfinished last turn was interrupted;
        otherwise that turn may still be running and is neither archived nor replayed.
        """
        async with self._session_lock(session.key):
            if not await self._file_lock(session.key, timeout=0):
                return 0  # another process is consolidating this session right now
            try:
                await self.sessions.refresh(session)
                await asyncio.to_thread(self.repair, session)
                budget = self.budget
                estimate = self.estimate(session)
                if only_if_due and not self.due(session):
                    return 0
                written = 0
                for _ in range(_MAX_ROUNDS):
                    overhead = self.overhead(session)
                    target = budget.target_for(overhead)
                    if estimate <= target:
                        break
                    # Leave room for the summary this round adds to Recent History, or the
                    # estimate lands just over the target and a second round (a second full
                    # request outside the prompt cache) follows.
                    room = min(2000, max(32, (target - overhead) // 8))
                    end = self._pick_boundary(session, estimate - target + room, turn_held)
                    if end is None:
                        log.info("session %s: no legal boundary to consolidate at", session.key)
                        break
                    outcome = await self._archive(session, session.last_consolidated, end,
                                                  turn_held)
                    written += outcome.entry is not None
                    new_estimate = self.estimate(session)
                    if new_estimate >= estimate:
                        break
                    estimate = new_estimate
                return written
            finally:
                self._release_file_lock(session.key)

    async def archive_until(
        self, session: Session, end: int, *, turn_held: bool = False
    ) -> SliceOutcome | None:
        """Archive everything before ``end`` (used by ``/new`` and idle compaction), as asked
        even when the last turn is unfinished (a failed turn's message goes too); only the
        summary request then avoids replaying a turn that may be running (see
        :meth:`consolidate`)."""
        async with self._session_lock(session.key):
            if not await self._file_lock(session.key, timeout=30):
                return None
            try:
                await self.sessions.refresh(session)
                await asyncio.to_thread(self.repair, session)
                end = min(end, len(session.messages))  # a stored fresh_start may be past the end
                if session.last_consolidated >= end:
                    return None
                return await self._archive(session, session.last_consolidated, end, turn_held)
            finally:
                self._release_file_lock(session.key)

    async def compact_idle(self, session: Session, *, turn_held: bool = False) -> None:
        """Archive an idle session's whole unconsolidated part and keep it as its summary.

        The raw messages stay in the session file (append-only); only the pointer moves, and
        the summary gives the next turn its continuity.
        """
        last_active = session.updated_at
        outcome = await self.archive_until(session, len(session.messages), turn_held=turn_held)
        if outcome and outcome.entry is not None and not outcome.raw:
            session.summary = ArchivedSummary(text=outcome.entry.content, last_active=last_active)
            await self.sessions.save_meta(session)

    async def resume_pending(self) -> int:
        """Finish ``/new`` archives a previous process did not complete; returns how many."""
        resumed = 0
        for info in await asyncio.to_thread(self.sessions.list):
            session = await self.sessions.aget(info.key)
            fresh = min(session.fresh_start, len(session.messages))  # damaged values count as 0
            await asyncio.to_thread(self.repair, session)
            if session.last_consolidated < fresh:
                self.jobs.schedule(f"archive:{session.key}", partial(self.archive_until, session, fresh))
                resumed += 1
        return resumed

    # --- steps ------------------------------------------------------------------------

    def repair(self, session: Session) -> None:
        """Fast-forward the pointer past a slice already archived by an interrupted run."""
        entries = self.memory.read_history(session_key=session.key)
        for entry in reversed(entries):
            src = entry.source
            if src is not None and src.session == session.key:
                if session.last_consolidated < src.end <= len(session.messages):
                    log.warning(
                        "session %s: history#%d already archives messages %d-%d; moving the "
                        "pointer past them", session.key, entry.cursor, src.start, src.end - 1,
                    )
                    session.last_consolidated = src.end
                break

    def _pick_boundary(self, session: Session, to_remove: int, turn_held: bool) -> int | None:
        start = session.last_consolidated
        msgs = session.messages
        bounds = legal_boundaries(msgs, start)
        # Never archive the user's newest message before it has been answered...
        if msgs and msgs[-1].get("role") == "user":
            bounds = [(b, u) for b, u in bounds if b < len(msgs)]
        # ...nor a turn that may still be running: its tool results would land after the cut.
        running = None if turn_held else open_turn_start(msgs, start)
        if running is not None:
            bounds = [(b, u) for b, u in bounds if b <= running]
        if not bounds:
            return None
        removed, i = 0, start
        first_any: int | None = None
        for b, is_user in bounds:
            removed += tokens.count_messages(msgs[i:b])
            i = b
            if removed >= to_remove:
                if is_user:
                    return b
                if first_any is None:
                    first_any = b
        # No user boundary far enough: a single tool-heavy turn may still be cut at an
        # assistant boundary; otherwise take the last user boundary we have.
        if first_any is not None:
            return first_any
        user_bounds = [b for b, u in bounds if u]
        return user_bounds[-1] if user_bounds else bounds[-1][0]

    async def _archive(
        self, session: Session, start: int, end: int, turn_held: bool
    ) -> SliceOutcome:
        key = session.key
        chunk = session.messages[start:end]
        visible = [m for m in chunk if not m.get("_command")]
        if not visible:
            await self._advance(session, end)
            return SliceOutcome(start, end, None)
        try:
            parsed = await self._summarise(session, start, end, turn_held)
            failure = None if parsed.ok else "the model's answer followed no known format"
        except ProviderError as exc:
            # an endpoint may echo the key it rejected; the reason goes into the archive
            parsed, failure = ParsedSummary(()), self.redact(str(exc))
        source = HistorySource(session=key, start=start, end=end)
        memory = self.memory
        if failure is not None:
            log.warning("session %s: summary of messages %d-%d failed (%s); archiving them raw",
                        key, start, end - 1, failure)
            content = raw_entry(chunk, session_key=key, start=start, end=end, reason=failure)
            entry = await asyncio.to_thread(
                memory.append_history, content, session_key=key, source=source
            )
            await self._advance(session, end)
            return SliceOutcome(start, end, entry, raw=True)
        if parsed.nothing:
            await self._advance(session, end)
            return SliceOutcome(start, end, None)
        entry = await asyncio.to_thread(
            memory.append_history, parsed.text, session_key=key, source=source,
            max_chars=SUMMARY_MAX_CHARS,
        )
        await self._advance(session, end)
        return SliceOutcome(start, end, entry)

    async def _advance(self, session: Session, end: int) -> None:
        if end > session.last_consolidated:
            session.last_consolidated = end
            await self.sessions.save_meta(session)

    async def _summarise(
        self, session: Session, start: int, end: int, turn_held: bool
    ) -> ParsedSummary:
        # The replay would stand in for the missing results of a turn that may be running.
        running = not turn_held and open_turn_start(session.messages, end) is not None
        prefix = None if running else self._prefix_request(session, start, end)
        if prefix is not None:
            return await self._ask(prefix[0], prefix[1], tool_mode=False)
        return await self._summarise_transcript(session, start, end)

    def _prefix_request(
        self, session: Session, start: int, end: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """The previous request + an instruction, when the slice is its oldest replayed part."""
        prepared = self.prompts.prepare(session)
        messages, schemas = prepared.messages, prepared.schemas
        history = session.get_history(max_messages=0)  # identity of replayed stored messages
        replayed_ids = {id(m) for m in history}
        slice_msgs = [m for m in session.messages[start:end] if not m.get("_command")]
        if not slice_msgs or not all(id(m) in replayed_ids for m in slice_msgs):
            return None
        if len(messages) - 1 < len(history):  # the replay was capped by the token budget
            return None
        count = len(slice_msgs)  # all of them are replayed (checked above)
        last = public_text(slice_msgs[-1]).strip().replace("\n", " ")
        if not last:
            last = f"a {slice_msgs[-1].get('role', 'tool')} message"
        instruction = render("consolidate.md", count=count, last_excerpt=last[:60])
        request = [*messages, {"role": "user", "content": instruction}]
        # The request must fit the window with its own reply (at most _SUMMARY_REPLY_TOKENS).
        budget = self.budget
        reply = min(_SUMMARY_REPLY_TOKENS, self.model.max_tokens)
        limit = budget.input + max(0, budget.reply_reserve - reply)
        if budget.enabled and tokens.count_messages(request) + tokens.count_tools(schemas) > limit:
            return None
        return request, schemas

    async def _summarise_transcript(self, session: Session, start: int, end: int) -> ParsedSummary:
        budget = max(1000, self.budget.input // 2) if self.budget.enabled else 50_000
        parts: list[tuple[int, int]] = []
        part_start, used = start, 0
        for i in range(start, end):
            cost = tokens.count_message(session.messages[i])
            if used and used + cost > budget:
                parts.append((part_start, i))
                part_start, used = i, 0
            used += cost
        parts.append((part_start, end))
        lines: list[str] = []
        nothing = True
        for n, (a, b) in enumerate(parts, 1):
            transcript = format_transcript(session.messages[a:b], max_chars=budget * 4)
            note = f"(Part {n} of {len(parts)} of a longer slice.)\n" if len(parts) > 1 else ""
            prompt = render(
                "consolidate_transcript.md", part_note=note, session_key=session.key,
                start=a, end=b - 1, transcript=transcript,
            )
            parsed = await self._ask([{"role": "user", "content": prompt}], [SAVE_SUMMARY_TOOL], tool_mode=True)
            if not parsed.ok:
                return parsed
            nothing = nothing and parsed.nothing
            lines.extend(line for line in parsed.lines if line not in lines)
        return ParsedSummary(tuple(lines), nothing=nothing and not lines)

    async def _ask(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, tool_mode: bool
    ) -> ParsedSummary:
        request = ChatRequest(
            model=self.model.name,
            messages=messages,
            tools=tools,
            tool_choice="auto" if tool_mode else "none",
            max_tokens=min(_SUMMARY_REPLY_TOKENS, self.model.max_tokens),
            temperature=self.model.temperature,
        )
        with usage_job("consolidation"):
            response = await collect(self.model.provider.stream(request))
        for call in response.tool_calls:
            if call["function"]["name"] == "save_summary":
                parsed = summary_from_tool_call(call["function"]["arguments"])
                if parsed.ok:
                    return parsed
        if response.finish_reason == "length":
            return ParsedSummary(())
        return parse_summary(response.text)

    # --- locks ------------------------------------------------------------------------

    def _session_lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _file_lock(self, key: str, timeout: float) -> bool:
        """Take the session's cross-process consolidation lock without blocking the event
        loop; False when another process kept it for ``timeout`` seconds. A lock file that
        cannot be created (full or read-only disk) is a StorageError."""
        path = self.workspace.consolidate_lock(key)
        try:
            held = await acquire_async(path, timeout=timeout)
        except LockTimeout:
            return False
        except OSError as exc:
            raise StorageError(
                f"cannot lock {path}: {exc.strerror or exc}; nothing was archived"
            ) from exc
        self._held[key] = held
        return True

    def _release_file_lock(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            held.release()
