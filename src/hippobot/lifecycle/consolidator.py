"""The Consolidator: archive the oldest unconsolidated slice of a session (SPEC 4.3).

Invariants
- A slice ``[start, end)`` is summarised, the summary is appended to ``history.jsonl`` with
  ``source = {session, from: start, to: end}``, and only then does ``last_consolidated`` move to
  ``end``. A crash between the two is repaired on the next run: an entry whose source ends after
  the pointer fast-forwards it (:meth:`Consolidator.repair`), so a slice is never archived twice
  and never lost.
- The session's turn lock is *not* held during the model call: a background consolidation never
  makes the user wait. A cross-process file lock keeps one consolidation per session.
- Whether the last turn may still be running is the :class:`~hippobot.lifecycle.slices.TurnGuard`
  the caller passes: such a turn is neither archived nor replayed in the summary request.
- The request itself is :class:`~hippobot.lifecycle.summary_request.Summariser`'s.
- A summary that fails writes nothing and moves nothing: the slice stays pending, its failure
  recorded in the session's meta record, and is retried (:mod:`~hippobot.lifecycle.archive_retry`
  says when, and when a bounded ``[RAW]`` entry is the last resort).
- Whatever the summary kept, the facts the user stated in the slice reach the entry
  (:mod:`~hippobot.lifecycle.stated_facts`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, partial
from typing import TYPE_CHECKING

from hippobot.errors import ProviderError, StorageError
from hippobot.lifecycle import archive_retry
from hippobot.lifecycle.slices import TurnGuard, pick_boundary
from hippobot.locks import HeldLock, LockTimeout, acquire_async
from hippobot.memory.history import HistoryEntry, HistorySource
from hippobot.memory.store import HISTORY_ENTRY_HARD_CAP
from hippobot.session.model import ArchivedSummary, Session
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.context.assembler import PromptAssembler
    from hippobot.context.budget import Budget
    from hippobot.lifecycle.background import BackgroundJobs
    from hippobot.lifecycle.summary_request import Summariser
    from hippobot.memory.store import MemoryStore
    from hippobot.providers.model import ModelClient
    from hippobot.session.manager import SessionManager

__all__ = ["Consolidator", "SliceOutcome", "TurnGuard"]

log = logging.getLogger(__name__)

_MAX_ROUNDS = 6


@dataclass(frozen=True, slots=True)
class SliceOutcome:
    start: int
    end: int
    entry: HistoryEntry | None  # None: nothing was worth keeping, or the summary failed
    raw: bool = False
    failed: str | None = None  # why the summary failed (the slice stays pending)


class Consolidator:
    """Archives sessions of one workspace. Collaborators: the sessions, the memory store,
    the prompt assembler (the same request a turn sends), the model, the budget, the
    background jobs, the workspace's lock names, the redaction of error texts and a clock."""

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
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.sessions = sessions
        self.memory = memory
        self.prompts = prompts
        self.budget = budget
        self.jobs = jobs
        self.workspace = workspace
        self.idle_minutes = idle_minutes
        self.redact = redact
        self.now = now or (lambda: datetime.now().astimezone())
        self._model = model
        self._locks = _ArchiveLocks(workspace)

    @cached_property
    def summariser(self) -> Summariser:
        # made at the first archive: a turn that only checks whether one is due never loads it
        from hippobot.lifecycle.summary_request import Summariser

        return Summariser(prompts=self.prompts, model=self._model, budget=self.budget)

    # --- sizing ---------------------------------------------------------------------

    def estimate(self, session: Session) -> int:
        """Prompt tokens the next request on this session would use (ground truth + delta)."""
        return self.prompts.estimate(session)

    def overhead(self, session: Session) -> int:
        """Tokens of the next request that are not conversation: system prompt + tool schemas."""
        return self.prompts.overhead(session)

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
        """Whether the session has replayed messages and was idle for ``idle_minutes``."""
        return _idle(session, self.idle_minutes, now or self.now())

    # --- entry points -----------------------------------------------------------------

    async def consolidate_locked(self, key: str) -> int:
        """Background entry point: consolidate a session by key if it is still over budget."""
        session = await self.sessions.aget(key)
        return await self.consolidate(session, only_if_due=True)

    async def consolidate(
        self, session: Session, *, only_if_due: bool = False, guard: TurnGuard = TurnGuard.BESIDE,
        last_resort: bool = False,
    ) -> int:
        """Archive oldest slices until the prompt is at the target; returns entries written.

        The target leaves at least half the conversation's room free (agent.budget), so the
        next consolidation is several turns away even in a 4,096-token window. A slice whose
        summary fails stays pending, unless its messages would otherwise leave the prompt
        unarchived: ``last_resort`` (the caller knows the conversation no longer fits), or the
        next request no longer replays them; then it becomes a ``[RAW]`` entry.
        """
        async with self._locks.hold(session.key, timeout=0) as held:
            if not held:
                return 0  # another process is consolidating this session right now
            await self.sessions.refresh(session)
            await asyncio.to_thread(self.repair, session)
            if only_if_due and not self.due(session):
                return 0
            last_resort = last_resort or self.prompts.left_out(session) > 0
            if not last_resort and not archive_retry.retry_due(session.archive_failure, self.now()):
                return 0  # it failed a moment ago: the next turn or the schedule retries
            return await self._rounds(session, guard, last_resort)

    async def _rounds(self, session: Session, guard: TurnGuard, last_resort: bool) -> int:
        written, estimate = 0, self.estimate(session)
        for _ in range(_MAX_ROUNDS):
            overhead = self.overhead(session)
            target = self.budget.target_for(overhead)
            if estimate <= target:
                break
            # Leave room for the summary this round adds to Recent History, or the estimate
            # lands just over the target and a second round (a second full request outside
            # the prompt cache) follows.
            room = min(2000, max(32, (target - overhead) // 8))
            start = session.last_consolidated
            end = pick_boundary(session.messages, start, estimate - target + room, guard)
            if end is None:
                log.info("session %s: no legal boundary to consolidate at", session.key)
                break
            outcome = await self._archive(session, start, end, guard, "pressure", last_resort)
            if outcome.failed is not None:
                break
            written += outcome.entry is not None
            new_estimate = self.estimate(session)
            if new_estimate >= estimate:
                break
            estimate = new_estimate
        return written

    async def archive_until(
        self, session: Session, end: int, *, guard: TurnGuard = TurnGuard.BESIDE,
        kind: str = "new", force: bool = False,
    ) -> SliceOutcome | None:
        """Archive everything before ``end`` (``/new``, idle compaction, retries), as asked
        even when the last turn is unfinished (a failed turn's message goes too); only the
        summary request then avoids replaying a turn that may be running. ``force``: retry
        at once even though an attempt failed a moment ago."""
        async with self._locks.hold(session.key, timeout=30) as held:
            if not held:
                return None
            await self.sessions.refresh(session)
            await asyncio.to_thread(self.repair, session)
            end = min(end, len(session.messages))  # a stored fresh_start may be past the end
            if session.last_consolidated >= end:
                return None
            if not force and not archive_retry.retry_due(session.archive_failure, self.now()):
                return None
            return await self._archive(session, session.last_consolidated, end, guard, kind)

    async def compact_idle(
        self, session: Session, *, guard: TurnGuard = TurnGuard.BESIDE, end: int | None = None,
        force: bool = False,
    ) -> None:
        """Archive an idle session's whole unconsolidated part and keep it as its summary.

        The raw messages stay in the session file (append-only); only the pointer moves, and
        the summary gives the next turn its continuity.
        """
        last_active = session.updated_at
        until = len(session.messages) if end is None else end
        outcome = await self.archive_until(session, until, guard=guard, kind="idle", force=force)
        if outcome and outcome.entry is not None and not outcome.raw:
            session.summary = ArchivedSummary(text=outcome.entry.content, last_active=last_active)
            await self.sessions.save_meta(session)

    def resume(self, session: Session, *, force: bool = False) -> asyncio.Task[object] | None:
        """Retry in the background what waits to be archived in ``session`` (a ``/new`` that
        did not finish, a failed consolidation), when a retry is due; the job, or ``None``."""
        wait = session.archive_wait()
        if wait is None or not (force or archive_retry.retry_due(session.archive_failure, self.now())):
            return None
        failure = session.archive_failure
        job: Callable[[], Awaitable[object]]
        if failure is not None and failure.kind == "idle":
            job = partial(self.compact_idle, session, end=wait.end, force=force)
        else:
            kind = failure.kind if failure else "new"
            job = partial(self.archive_until, session, wait.end, kind=kind, force=force)
        return self.jobs.schedule(f"archive:{session.key}", job)

    async def resume_pending(self, *, force: bool = False, wait: bool = False) -> int:
        """Retry what waits to be archived in every session (``wait``: until done); returns
        how many sessions had something to retry."""
        tasks = []
        for info in await asyncio.to_thread(self.sessions.list):
            if info.archive_wait is None:
                continue
            session = await self.sessions.aget(info.key)
            await asyncio.to_thread(self.repair, session)
            task = self.resume(session, force=force)
            if task is not None:
                tasks.append(task)
        if wait and tasks:
            await asyncio.wait(tasks)
        return len(tasks)

    # --- steps ------------------------------------------------------------------------

    def repair(self, session: Session) -> None:
        """Fast-forward the pointer past a slice already archived by an interrupted run."""
        entry = _archived_past_pointer(session, self.memory.read_history(session_key=session.key))
        if entry is not None and entry.source is not None:
            src = entry.source
            log.warning(
                "session %s: history#%d already archives messages %d-%d; moving the pointer "
                "past them", session.key, entry.cursor, src.start, src.end - 1,
            )
            session.last_consolidated = src.end

    async def _archive(
        self, session: Session, start: int, end: int, guard: TurnGuard, kind: str,
        last_resort: bool = False,
    ) -> SliceOutcome:
        from hippobot.lifecycle import stated_facts as facts
        from hippobot.lifecycle import summaries

        chunk = session.messages[start:end]
        if not any(not m.get("_command") for m in chunk):
            await self._advance(session, end)
            return SliceOutcome(start, end, None)
        stated = facts.stated_facts(chunk, first_index=start)
        try:
            parsed = await self.summariser.summarise(session, start, end, guard)
            failure = None if parsed.ok else "the model's answer followed no known format"
        except ProviderError as exc:
            # an endpoint may echo the key it rejected; the reason goes into the archive
            parsed, failure = summaries.ParsedSummary(()), self.redact(str(exc))
        if failure is None:
            _log_invented(session.key, start, end, parsed.invented, self.redact)
            parsed = facts.with_stated_facts(facts.without_recalled(parsed, chunk), stated)
            entry = None if parsed.nothing else await _append(
                self.memory, session, start, end, parsed.text, summaries.SUMMARY_MAX_CHARS)
            await self._advance(session, end)
            return SliceOutcome(start, end, entry)
        now = self.now()
        record = archive_retry.failed(session.archive_failure, end=end, reason=failure, kind=kind, now=now)
        if not (last_resort or archive_retry.gives_up(record, now)):
            log.warning("session %s: summary of messages %d-%d failed (%s); they stay pending and "
                        "are retried", session.key, start, end - 1, failure)
            session.archive_failure = record
            await self.sessions.save_meta(session)
            return SliceOutcome(start, end, None, failed=failure)
        log.warning("session %s: summary of messages %d-%d failed (%s); archiving them raw",
                    session.key, start, end - 1, failure)
        content = summaries.raw_entry(chunk, session_key=session.key, start=start, end=end, reason=failure,
                            facts=[f.render() for f in stated])
        entry = await _append(self.memory, session, start, end, content, HISTORY_ENTRY_HARD_CAP)
        await self._advance(session, end)
        return SliceOutcome(start, end, entry, raw=True)

    async def _advance(self, session: Session, end: int) -> None:
        moved = end > session.last_consolidated
        session.last_consolidated = max(session.last_consolidated, end)
        failure = session.archive_failure
        settled = failure is not None and failure.end <= session.last_consolidated
        if settled:
            session.archive_failure = None  # what failed is archived now
        if moved or settled:
            await self.sessions.save_meta(session)


async def _append(
    memory: MemoryStore, session: Session, start: int, end: int, content: str, max_chars: int
) -> HistoryEntry:
    source = HistorySource(session=session.key, start=start, end=end)
    return await asyncio.to_thread(
        memory.append_history, content, session_key=session.key, source=source,
        max_chars=max_chars,
    )


def _log_invented(key: str, start: int, end: int, lines: Sequence[str], redact: Callable[[str], str]) -> None:
    if lines:  # left out of the entry (stated_facts.without_invented); redacted: a key may be among them
        log.warning("session %s: the summary of messages %d-%d named what the conversation never did; "
                    "left out: %s", key, start, end - 1, redact("; ".join(lines)))


def _idle(session: Session, minutes: float, now: datetime) -> bool:
    if minutes <= 0 or session.replay_start >= len(session.messages):
        return False
    try:
        updated = datetime.fromisoformat(session.updated_at)
    except (TypeError, ValueError):
        return False
    if updated.tzinfo is None:
        updated = updated.astimezone()
    return (now - updated).total_seconds() >= minutes * 60


def _archived_past_pointer(session: Session, entries: list[HistoryEntry]) -> HistoryEntry | None:
    """The session's newest history entry, when it archives messages the pointer has not
    passed yet (a run stopped between appending the entry and moving the pointer)."""
    for entry in reversed(entries):
        src = entry.source
        if src is not None and src.session == session.key:
            fits = session.last_consolidated < src.end <= len(session.messages)
            return entry if fits else None
    return None


class _ArchiveLocks:
    """One consolidation per session: an asyncio lock in this process, then the session's
    cross-process consolidation lock (``Workspace.consolidate_lock``)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        # idle locks are garbage-collected, so a server seeing many sessions stays small
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @asynccontextmanager
    async def hold(self, key: str, *, timeout: float) -> AsyncIterator[bool]:
        """Both locks (yields True), or False when another process kept the file lock for
        ``timeout`` seconds. Taken without blocking the event loop; a lock file that cannot
        be created (full or read-only disk) is a StorageError."""
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            path = self.workspace.consolidate_lock(key)
            try:
                held: HeldLock = await acquire_async(path, timeout=timeout)
            except LockTimeout:
                yield False
                return
            except OSError as exc:
                raise StorageError(
                    f"cannot lock {path}: {exc.strerror or exc}; nothing was archived"
                ) from exc
            try:
                yield True
            finally:
                held.release()
