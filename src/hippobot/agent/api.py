"""The application API: what the front ends (``cli/``, ``server/``) do with a workspace.

Both front ends call :class:`Api` instead of reaching into the stores, so a command and its
HTTP or chat counterpart cannot drift apart:

* **Reading** (:meth:`~Api.memory_files`, :meth:`~Api.history`, :meth:`~Api.search`,
  :meth:`~Api.sessions`, :meth:`~Api.session`, :meth:`~Api.versions`, :meth:`~Api.version`,
  :meth:`~Api.usage`, :meth:`~Api.status`, :meth:`~Api.context`) never creates, writes or
  migrates a file: the stores are opened read-only (no folder, lock file, ``.corrupt``
  copy, legacy migration, cursor repair or repository is made). The one exception is the
  search index, derived state in ``.hippobot/recall.sqlite3``: :meth:`~Api.search` brings it
  up to date with the files first, and only in a workspace that exists.
* **Writing**: :meth:`~Api.handle` (a chat message), :meth:`~Api.delete_session`,
  :meth:`~Api.restore`, :meth:`~Api.reindex`, :meth:`~Api.dream`. They go through the
  workspace's :class:`~hippobot.agent.agent.Agent` (the composition root), built on first use.
* **Messages**: :meth:`~Api.handle` routes a slash command to
  :class:`~hippobot.agent.commands.CommandRouter` (whose operations are the ``chat_*``
  methods here) and anything else to :meth:`Agent.turn`, which only runs model turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hippobot.agent.agent import Agent, TurnResult
from hippobot.agent.commands import CommandRouter, is_command
from hippobot.errors import StorageError, UserError

# Presentation the front ends print with, re-exported so that they import no store.
from hippobot.lifecycle.versions import CHAT_HINTS as CHAT_HINTS
from hippobot.lifecycle.versions import SHELL_HINTS as SHELL_HINTS
from hippobot.lifecycle.versions import Hints
from hippobot.lifecycle.versions import commit_json as commit_json
from hippobot.lifecycle.versions import format_log as format_log
from hippobot.lifecycle.versions import format_restore as format_restore
from hippobot.lifecycle.versions import format_versions as format_versions
from hippobot.lifecycle.versions import restore_json as restore_json
from hippobot.recall.tools import format_explained as format_explained
from hippobot.recall.tools import format_hits as format_hits
from hippobot.recall.tools import hits_to_json as hits_to_json
from hippobot.session.keys import validate_key
from hippobot.usage_ledger import format_table as format_table
from hippobot.workspace import MEMORY_FILES, MEMORY_MD, SOUL_MD, USER_MD, VERSIONED_FILES

if TYPE_CHECKING:
    from hippobot.agent.inspect import ContextReport, StatusReport
    from hippobot.config import Settings
    from hippobot.lifecycle.dream import DreamResult, HeldBatch
    from hippobot.loop.events import EventSink
    from hippobot.memory.gitstore import CommitDiff, CommitInfo, RevertResult
    from hippobot.memory.history import HistoryEntry
    from hippobot.providers.base import Provider
    from hippobot.recall.index import RecallIndex, SyncStats
    from hippobot.recall.query import Hit
    from hippobot.session.model import ArchiveWait, Session
    from hippobot.session.store import SessionInfo
    from hippobot.usage_ledger import UsageRow

__all__ = [
    "CHAT_HINTS",
    "INTERNAL_PREFIXES",
    "SHELL_HINTS",
    "Api",
    "HistoryView",
    "Reindex",
    "SearchResult",
    "SessionList",
    "commit_json",
    "format_explained",
    "format_hits",
    "format_log",
    "format_restore",
    "format_table",
    "format_versions",
    "hits_to_json",
    "restore_json",
]

log = logging.getLogger(__name__)

#: Sessions nanobot writes for itself (one per Dream run): not conversations a person had.
INTERNAL_PREFIXES = ("dream:",)
_SEARCH_FILL = 64  # documents a search may embed first (about a second with the local model)
FINISH_TIMEOUT_S = 600.0
"""How long a CLI chat waits at its end for archiving (a slow local model takes minutes)."""


@dataclass(frozen=True, slots=True)
class HistoryView:
    """History entries with what Dream made of them."""

    entries: list[HistoryEntry]
    dream_cursor: int
    held: list[HeldBatch]
    archives: list[ArchiveWait] = field(default_factory=list)  # messages not archived yet

    def pending(self, entry: HistoryEntry) -> bool:
        return entry.cursor > self.dream_cursor

    def waiting(self, cursor: int) -> str | None:
        """Why the entry at ``cursor`` still waits for Dream (``None``: it does not)."""
        if cursor <= self.dream_cursor:
            return None
        for h in self.held:
            if h.first <= cursor <= h.last:
                return h.reason
        return "not processed yet: Dream has not run since it was archived"


@dataclass(frozen=True, slots=True)
class SearchResult:
    hits: list[Hit]
    warning: str | None = None  # semantic recall configured but not working
    unembedded: int = 0  # documents found by their words only (no vector yet)


@dataclass(frozen=True, slots=True)
class SessionList:
    shown: list[SessionInfo]
    hidden: int  # internal sessions left out


class Reindex:
    """A rebuilt index; :meth:`embed_all` then embeds every document when semantic recall
    is configured."""

    def __init__(self, index: RecallIndex, stats: SyncStats) -> None:
        self.index, self.stats = index, stats

    @property
    def semantic(self) -> bool:
        return self.index.semantic

    def embed_all(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed until nothing is left (or no progress is made); ``progress(done, left)``."""
        embedded = 0
        with _index_errors(self.index.path):
            while True:
                fill = self.index.embed_pending(max_docs=512)
                embedded += fill.embedded
                if fill.pending and progress is not None:
                    progress(embedded, fill.pending)
                if not fill.pending or not fill.embedded:
                    return embedded

    def warning(self) -> str | None:
        return self.index.take_semantic_warning()


@contextlib.contextmanager
def _index_errors(path: Path) -> Iterator[None]:
    """A full or read-only disk under the search index: one line, not a traceback."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StorageError(
            f"the search index {path} cannot be used ({exc}); free disk space or make the "
            "workspace writable, then run `hippobot memory reindex`"
        ) from None


@contextlib.contextmanager
def _list_hint(hints: Hints) -> Iterator[None]:
    """An unknown version names the command that lists them."""
    from hippobot.memory.gitstore import UnknownCommit

    try:
        yield
    except UnknownCommit as exc:
        raise UnknownCommit(f"{exc}; list them with `{hints.restore}`") from None


class Api:
    """One workspace as the front ends see it (see the module docstring).

    ``agent``: an agent already built (``hippobot serve`` has one per user); otherwise one
    is built on first write. Reads use that agent when there is one, else an agent on
    read-only stores.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        project: Path | None = None,
        agent: Agent | None = None,
        provider: Provider | None = None,
    ) -> None:
        if project is not None and not project.is_dir():
            raise UserError(f"project directory {project} does not exist")
        self.settings = settings
        self.project = project
        self._provider = provider
        self._agent = agent
        self._reader: Agent | None = None
        self._router = CommandRouter(self)

    @classmethod
    def for_agent(cls, agent: Agent) -> Api:
        return cls(agent.settings, project=agent.project, agent=agent)

    @property
    def workspace(self) -> Path:
        return self.settings.workspace

    @property
    def agent(self) -> Agent:
        """The workspace's agent (the writing side), built on first use."""
        if self._agent is None:
            self._agent = Agent(self.settings, project=self.project, provider=self._provider)
        return self._agent

    def _read(self) -> Agent:
        if self._agent is not None:
            return self._agent
        if self._reader is None:
            self._reader = Agent(self.settings, project=self.project, read_only=True)
        return self._reader

    def scrub(self, text: str) -> str:
        """``text`` through the agent's redactor (output built from older, unredacted data)."""
        return self._read().redactor(text)

    # --- memory files, history, search ----------------------------------------------------

    def memory_files(self) -> dict[str, str]:
        """SOUL.md, USER.md and memory/MEMORY.md as they are now ("" when missing)."""
        memory = self._read().memory
        read = {SOUL_MD: memory.read_soul, USER_MD: memory.read_user, MEMORY_MD: memory.read_memory}
        return {name: read[name]() for name in MEMORY_FILES}

    def history(
        self, *, pending: bool = False, session: str | None = None, limit: int = 0
    ) -> HistoryView:
        """Archived entries, oldest first (also those Dream moved to the archive), or with
        ``pending`` only those Dream has not processed; ``limit`` keeps the newest."""
        from hippobot.lifecycle.dream import read_pending_reasons

        store = self._read().memory
        legacy = store.legacy_entries()  # nanobot's HISTORY.md, not migrated yet
        dream_cursor = max(store.dream_cursor(), legacy[-1].cursor if legacy else 0)
        entries = store.read_history(after=dream_cursor if pending else 0, session_key=session)
        if not pending:
            live = {e.cursor for e in entries}
            older = [e for e in store.read_archive() + legacy if e.cursor not in live]
            if session is not None:
                older = [e for e in older if e.session_key == session]
            entries = older + entries
        if limit:
            entries = entries[-limit:]
        archives = [w for w in self.archives_waiting() if session is None or w.session == session]
        return HistoryView(entries, dream_cursor, read_pending_reasons(self.workspace), archives)

    def prompt_files(self) -> dict[str, str]:
        """The other versioned files that shape the prompt (AGENTS.md, skills/, prompts/)."""
        shown_elsewhere = set(VERSIONED_FILES)  # the memory files, the cursor, .gitignore
        files = self._read().git.working_files()
        return {rel: data.decode("utf-8", "replace") for rel, data in sorted(files.items())
                if rel not in shown_elsewhere}

    def semantic_unavailable(self) -> str | None:
        """Why semantic recall is configured but not searching by meaning (None: it is, or
        it is not configured)."""
        from hippobot.recall.embedders import embedder_from_settings, semantic_configured
        from hippobot.recall.embeddings import EmbeddingsUnavailableError

        if not semantic_configured(self.settings) or self._read().recall.semantic:
            return None
        try:  # the reason was logged once when the index was opened; give it again
            embedder_from_settings(self.settings)
        except EmbeddingsUnavailableError as exc:
            return f"semantic recall unavailable, searching by keywords only: {exc}"
        return "semantic recall unavailable, searching by keywords only"

    def search(self, query: str, *, k: int = 8, explain: bool = False) -> SearchResult:
        """History, every session and the memory files, by words (and meaning, when
        ``recall.embeddings`` is configured). Syncs the derived index first; a workspace
        that does not exist has nothing to find and is not created."""
        if not self.workspace.is_dir():
            return SearchResult([])
        index = self._read().recall
        left = 0
        with _index_errors(index.path):
            if index.semantic:  # a few of the newest documents still without a vector
                left = index.embed_pending(max_docs=_SEARCH_FILL).pending
            hits = index.search(query, k=k, explain=explain)
        return SearchResult(hits, index.take_semantic_warning(), left)

    def reindex(self) -> Reindex:
        """Rebuild the search index from the files (it is derived state)."""
        from hippobot.recall.embedders import open_index

        index = open_index(self.settings, redactor=self._read().redactor, auto_sync=False)
        with _index_errors(index.path):
            stats = index.rebuild()
        return Reindex(index, stats)

    # --- sessions --------------------------------------------------------------------------

    def sessions(self, *, include_internal: bool = False) -> SessionList:
        """Conversations, newest first."""
        infos = sorted(
            self._read().sessions.list(), key=lambda i: i.updated_at or "", reverse=True
        )
        internal = [i for i in infos if i.key.startswith(INTERNAL_PREFIXES)]
        if not include_internal:
            infos = [i for i in infos if not i.key.startswith(INTERNAL_PREFIXES)]
        return SessionList(infos, 0 if include_internal else len(internal))

    def session(self, key: str) -> Session:
        """One conversation as stored; a UserError naming the list command when none."""
        session = self._read().sessions.store.load(key)
        if session is None:
            raise UserError(f"no session {key!r}: see `hippobot sessions list`")
        return session

    async def delete_session(self, key: str) -> None:
        """Delete the conversation's file (its archived history entries stay)."""
        if not await self.agent.sessions.delete(key):
            raise UserError(f"no session {key!r}: see `hippobot sessions list`")

    # --- versions, Dream, usage, reports ---------------------------------------------------

    def versions(self, limit: int = 15) -> list[CommitInfo]:
        from hippobot.lifecycle.versions import versions_data

        return versions_data(self._read().git, limit)

    def versioning_state(self) -> str:
        """"on (N versions)", "off (why)" or "not started yet (...)"."""
        return self._read().versioning_state()

    def version(self, sha: str | None, hints: Hints = SHELL_HINTS) -> CommitDiff | None:
        """One version with its diff (default: the latest Dream change); ``None`` when there
        is no history yet. An unknown ``sha`` names ``hints.restore``, which lists them."""
        from hippobot.lifecycle.versions import log_data

        with _list_hint(hints):
            return log_data(self._read().git, sha)

    def restore(self, sha: str, hints: Hints = SHELL_HINTS) -> RevertResult:
        """Undo one memory version as a new commit, keeping later edits."""
        from hippobot.lifecycle.versions import restore_data

        agent = self.agent
        with _list_hint(hints):
            return restore_data(agent.git, sha, after_cursor=agent.memory.last_cursor())

    async def dream(self, *, dry_run: bool = False) -> DreamResult:
        """Finish what waits to be archived first (at once, whatever failed before), so its
        facts are in the history Dream reads; then Dream."""
        agent = self.agent
        if not dry_run and agent.llm.configured():
            await agent.consolidator.resume_pending(force=True, wait=True)
        return await agent.dream.run(dry_run=dry_run)

    def archives_waiting(self) -> list[ArchiveWait]:
        """Messages of any session that still have to reach the archive, and why."""
        return [i.archive_wait for i in self._read().sessions.list() if i.archive_wait is not None]

    def usage(self, days: int | None = None) -> tuple[list[UsageRow], Path]:
        """Requests and tokens per day and job, and the ledger they come from."""
        from hippobot.usage_ledger import UsageLedger, summarise

        ledger = UsageLedger.for_workspace(self.workspace)
        return summarise(ledger.read(), days=days), ledger.path

    def status(self, key: str) -> StatusReport:
        from hippobot.agent.inspect import status_report

        return status_report(self._read(), key)

    def context(self, key: str) -> ContextReport:
        from hippobot.agent.inspect import context_report

        return context_report(self._read(), key)

    # --- messages --------------------------------------------------------------------------

    async def handle(
        self,
        key: str,
        text: str,
        *,
        media: Sequence[str] = (),
        on_event: EventSink | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> TurnResult:
        """One message from a person: a slash command is answered here, anything else is a
        model turn (the CLI chat, ``agent -m`` and ``serve`` all come through here)."""
        validate_key(key)
        agent = self.agent
        command = self._router.parse(text) if is_command(text, media) else None
        if command is not None:
            agent.check_message(text)  # a model turn's message is checked by Agent.turn
            return TurnResult(reply=await self._router.run(key, command), command=True)
        return await agent.turn(
            key, text, media=media, on_event=on_event, max_tokens=max_tokens, stop=stop
        )

    def start_schedulers(self) -> list[asyncio.Task[None]]:
        """Background loops of a long-running process (Dream schedule, idle compaction)."""
        return self.agent.start_schedulers()

    async def aclose(self, timeout: float | None = 120.0) -> None:
        """Finish background work (consolidation, /new archiving) before the process exits."""
        if self._agent is not None:
            await self._agent.aclose(timeout)

    async def finish(self, notice: Callable[[str], None] | None = None) -> None:
        """The end of a CLI chat, after its last reply was shown: what waits to be archived
        in any session is retried, and background archiving finishes (``notice`` says so when
        it takes more than a second; bounded by :data:`FINISH_TIMEOUT_S`; what does not finish,
        a kill or Ctrl-C included, stays pending and resumes next start); then, if pending
        facts are about to outgrow Recent History, Dream starts detached, so a one-shot run
        never waits for it."""
        with contextlib.suppress(Exception):
            agent = self._agent
            if agent is not None:
                agent.resume_archives()
                await agent.jobs.drain(1.0)
                if notice is not None and agent.archiving():
                    notice("archiving the conversation to memory… (Ctrl-C leaves it for the next run)")
            await self.aclose(timeout=FINISH_TIMEOUT_S)
        with contextlib.suppress(Exception):
            self._dream_if_due()

    def _dream_if_due(self) -> None:
        from hippobot.lifecycle.autodream import dream_due, spawn_background_dream

        agent = self.agent
        if not self.settings.defaults.dream.auto or not self.settings.model_configured():
            return
        if dream_due(agent.memory, agent.budget.history_tokens) is not None:
            spawn_background_dream(self.workspace)

    # --- the slash commands' operations (CommandTarget) ------------------------------------

    async def chat_new(self, key: str) -> str:
        pending = await self.agent.new_session(key)
        if pending:
            return f"New session started. The previous {pending} message(s) are being archived to memory."
        return "New session started."

    async def chat_status(self, key: str) -> str:
        from hippobot.agent.inspect import status_report

        agent = self.agent
        await agent.sessions.aget(key)  # loaded off the loop; the report reads it cached
        return status_report(agent, key).to_text()

    async def chat_context(self, key: str, *, full: bool) -> str:
        from hippobot.agent.inspect import context_report

        agent = self.agent
        await agent.sessions.aget(key)  # loaded off the loop; the report reads it cached
        return context_report(agent, key).to_text(full=full)

    async def chat_dream(self, *, dry_run: bool) -> str:
        text = (await self.dream(dry_run=dry_run)).describe()
        waiting = await asyncio.to_thread(self.archives_waiting)
        return "\n".join([text, *(w.describe() for w in waiting)])

    async def chat_log(self, sha: str | None) -> str:
        from hippobot.lifecycle.versions import describe_log

        return await asyncio.to_thread(describe_log, self.agent.git, sha)

    async def chat_versions(self) -> str:
        from hippobot.lifecycle.versions import list_versions

        return await asyncio.to_thread(list_versions, self.agent.git)

    async def chat_restore(self, sha: str) -> str:
        from hippobot.lifecycle.versions import describe_restore

        git, memory = self.agent.git, self.agent.memory

        def restore() -> str:
            return describe_restore(git, sha, after_cursor=memory.last_cursor())

        return await asyncio.to_thread(restore)

    async def chat_dream_prompt(self, arg: str) -> str:
        from hippobot.lifecycle.dream import dream_prompt_command

        return await asyncio.to_thread(dream_prompt_command, self.agent.dream, arg)

    async def chat_usage(self) -> str:
        rows, path = await asyncio.to_thread(self.usage)
        return format_table(rows, path=path)
