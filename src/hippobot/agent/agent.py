"""The agent: composition root and the turn pipeline (SPEC 4.1).

A turn is a short pipeline of named steps — lock, refresh, save the user's message, build the
prompt, run the tool loop, record usage, schedule consolidation — and owns no storage details:
sessions, memory files, prompts and tools each live behind their own module.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hippobot.config import Settings
from hippobot.context import tokens
from hippobot.context.assembler import PreparedRequest, PromptAssembler, split_key
from hippobot.context.budget import Budget, compact_prompt, usage_estimate
from hippobot.context.builder import ContextBuilder
from hippobot.context.loader import WorkspaceFiles
from hippobot.context.runtime import attach_runtime_context, runtime_context_block
from hippobot.context.skills import FrontMatterCache, SkillsIndex
from hippobot.errors import ProviderError, StorageError, UserError
from hippobot.lifecycle.background import BackgroundJobs
from hippobot.locks import LockTimeout, acquire_async
from hippobot.loop.events import EventSink, Notice, Remembered, ReplyDone
from hippobot.loop.runner import Runner, RunResult
from hippobot.memory.store import MemoryStore
from hippobot.messages import Message, ToolCall, scrubbed, unencodable
from hippobot.providers.model import ModelClient
from hippobot.redact import Redactor
from hippobot.session.keys import validate_key
from hippobot.session.manager import SessionManager
from hippobot.session.model import Session, SessionUsage
from hippobot.session.store import JsonlSessionStore
from hippobot.usage_ledger import UsageLedger
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.agent.chat_versions import ChatVersions
    from hippobot.lifecycle.consolidator import Consolidator
    from hippobot.lifecycle.dream import Dream
    from hippobot.memory.gitstore import GitStore
    from hippobot.providers.base import ChatRequest, Provider
    from hippobot.providers.retry import RetryPolicy
    from hippobot.recall.auto import AutoRecall, Recollection
    from hippobot.recall.index import RecallIndex
    from hippobot.tools.base import ToolRegistry

__all__ = ["Agent", "TurnResult", "split_key"]

log = logging.getLogger(__name__)

TURN_LOCK_TIMEOUT_S = 600.0
_REGISTRY_CACHE = 128
_RECALL_QUERY_CHARS = 2_000  # of a long message, its start and end are searched
_INLINE_MESSAGE_CHARS = 2_000  # a message this short is redacted on the event loop (~0.1 ms)
# Recalled memory is saved with its message and replayed with it: at most 1/32 of the input
# budget per message (~230 tokens in an 8,192-token window, 300 from ~10k up), and none when
# that is under 100 tokens (windows under ~4,600 tokens: in a 4,096-token window even one
# hit per turn tripled the archive requests of a long chat, 8 -> 22 per 80 turns).
_RECALL_BUDGET_DIVISOR = 32
_RECALL_MIN_TOKENS = 110


_WRITING_TOOLS = frozenset({"write_file", "edit_file", "exec"})


def _may_write(msg: Message) -> bool:
    """Whether the tool calls of ``msg`` may change a file (then the turn versions them)."""
    return any((call.get("function") or {}).get("name") in _WRITING_TOOLS
               for call in msg.get("tool_calls") or ())


def _map_strings(value: Any, clean: Any) -> Any:
    """``value`` (parsed JSON) with ``clean`` applied to every string in it."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        return [_map_strings(v, clean) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, clean) for k, v in value.items()}
    return value


def _progress_size(
    session: Session, request: PreparedRequest, *, fits: bool
) -> Callable[[ChatRequest], int]:
    """The prompt size "waiting for <model> · N tokens" shows, for each request of a turn.

    Estimating a whole request costs about a third of a millisecond per replayed message,
    which on every turn of a long chat was most of the turn's own time. So the size is the
    provider's report on the last request plus an estimate of what came since (the new
    message, then the tool loop's steps), when that report still describes the replay
    (``fits``: the replay is not cut to the budget); else the first request is estimated once.
    Never loads the tokenizer's tables."""
    first = len(request.messages)
    base = usage_estimate(session, count=tokens.estimate_messages) if fits else None

    def size(r: ChatRequest) -> int:
        nonlocal base
        if base is None:
            base = tokens.prompt_size(messages=r.messages[:first], tools=r.tools, estimate=True).total
        return base + tokens.estimate_messages(r.messages[first:])

    return size


@dataclass(slots=True)
class TurnResult:
    reply: str
    command: bool = False
    run: RunResult | None = None
    remembered: str | None = None  # what hippobot itself kept of a "remember that…" (one line)


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """The per-turn settings, read once from the configuration."""

    max_iterations: int
    max_tokens: int
    max_tool_result_chars: int
    idle_compact_after_minutes: float


class Agent:
    """One workspace, its sessions and memory, and a (lazily created) model.

    The constructor is the composition root: every service gets the narrow collaborators
    it needs (sessions, memory, the prompt assembler, the model, the budget, the jobs, the
    workspace's paths and locks) and never the agent itself.

    ``read_only`` opens the sessions and the memory store for reading only (nothing is
    created, locked, quarantined or migrated): the read commands' reports use such an agent.
    Slash commands are not the agent's business: front ends route them
    (:meth:`hippobot.agent.api.Api.handle`); :meth:`turn` only runs model turns.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        provider: Provider | None = None,
        project: Path | None = None,
        now: Any = None,
        read_only: bool = False,
    ) -> None:
        self.settings = settings
        self.workspace = settings.workspace
        self.paths = Workspace(self.workspace)
        self.project = project.resolve() if project else None
        self._now = now or (lambda: datetime.now().astimezone())
        defaults = settings.defaults
        self.limits = TurnLimits(
            max_iterations=defaults.max_tool_iterations,
            max_tokens=defaults.reply_tokens,
            max_tool_result_chars=defaults.max_tool_result_chars,
            idle_compact_after_minutes=defaults.idle_compact_after_minutes,
        )
        self.budget = Budget(
            context_window=defaults.context_window_tokens,
            max_tokens=defaults.reply_tokens,
            threshold=defaults.consolidation_threshold,
            ratio=defaults.consolidation_ratio,
        )
        # The one redaction of configured keys and token shapes, for everything that keeps
        # text: messages, history, memory-file writes, commits, the index, error texts.
        self.redactor = Redactor(settings.secrets())
        self.read_only = read_only
        self.sessions = SessionManager(JsonlSessionStore(self.workspace, read_only=read_only))
        self.memory = MemoryStore(self.workspace, redactor=self.redactor, read_only=read_only)
        self.files = WorkspaceFiles(
            self.workspace, self.project, max_file_chars=defaults.bootstrap_max_chars
        )
        self.skills = SkillsIndex(
            self.workspace, env=settings.env,
            front_matter=FrontMatterCache(self.paths.skills_cache, write=not read_only),
        )
        self.jobs = BackgroundJobs()
        self.llm = ModelClient(
            settings.model_target,
            max_tokens=defaults.reply_tokens,
            temperature=defaults.temperature,
            fallback_name=defaults.model,
            provider=provider,
            text_tool_calls=defaults.text_tool_calls,
            usage=UsageLedger.for_workspace(self.workspace),
            estimate=lambda r: tokens.prompt_size(messages=r.messages, tools=r.tools).total,
            home=settings.home,
            serial_requests=defaults.serial_requests,
        )
        self._registries: OrderedDict[str, ToolRegistry] = OrderedDict()  # LRU, bounded
        self.prompts = PromptAssembler(
            builder=ContextBuilder(
                self.files,
                self.skills,
                max_history_tokens=self.budget.history_tokens,
                memory_budget=(
                    int(self.budget.input * settings.config.recall.memory_share)
                    if self.budget.enabled
                    else 0
                ),
                compact=compact_prompt(self.budget.context_window),
            ),
            history=self.memory,
            tools_for=self.tools_for,
            model_label=self.llm.label,
            budget=self.budget,
            max_history_messages=defaults.max_history_messages,
            include_other_sessions=defaults.see_other_sessions,
        )
        self._window_checked = False
        self._semantic_warned: str | None = None
        self._recall_lock = threading.Lock()
        self._recalled: dict[str, Recollection] = {}  # per session: the latest message's
        # Set by a server with several users before the first turn: the folders this agent's
        # tools never see besides hippobot's home (the other people's workspaces), and
        # whether its model gets exec at all (not without a sandbox, unless allowed).
        self.private_paths: tuple[Path, ...] = ()
        self.exec_enabled = True

    # --- collaborators created on first use (keeps start-up fast) ---------------------

    @property
    def retry_policy(self) -> RetryPolicy | None:
        return self.llm.retry

    @retry_policy.setter
    def retry_policy(self, policy: RetryPolicy | None) -> None:
        self.llm.retry = policy  # None: the provider's default policy

    @property
    def provider(self) -> Provider:
        return self.llm.provider

    @property
    def model(self) -> str:
        """The configured model (resolved once; raises UserError when there is none)."""
        return self.llm.name

    def model_label(self) -> str:
        """The model name for display: configured or not, never an error."""
        return self.llm.label()

    @cached_property
    def recall(self) -> RecallIndex:
        from hippobot.recall.embedders import open_index

        return open_index(self.settings, redactor=self.redactor)

    @cached_property
    def git(self) -> GitStore:
        from hippobot.memory.gitstore import GitStore

        return GitStore(self.workspace, redactor=self.redactor)

    @cached_property
    def consolidator(self) -> Consolidator:
        from hippobot.lifecycle.consolidator import Consolidator

        return Consolidator(
            sessions=self.sessions,
            memory=self.memory,
            prompts=self.prompts,
            model=self.llm,
            budget=self.budget,
            jobs=self.jobs,
            workspace=self.paths,
            idle_minutes=self.limits.idle_compact_after_minutes,
            redact=self.redactor,
            now=self._now,
        )

    @cached_property
    def dream(self) -> Dream:
        from hippobot.lifecycle.dream import Dream

        return Dream(
            workspace=self.paths,
            memory=self.memory,
            git=lambda: self.git,
            model=self.llm,
            config=self.settings.defaults.dream,
            budget=self.budget,
            redact=self.redactor,
        )

    def versioning_state(self) -> str:
        git = self.git
        if not git.initialized:
            return "not started yet (the first Dream or memory edit creates the history)"
        if not git.available:
            return f"off ({git.broken_reason})"
        return f"on ({len(git.log(limit=1000))} versions)"

    def start_schedulers(self) -> list[asyncio.Task[None]]:
        """Background loops of a long-running process: Dream schedule, idle compaction."""
        from hippobot.lifecycle.schedule import Schedules, start_schedulers

        if not self.llm.configured():
            return []
        return start_schedulers(
            Schedules(
                dream=self.dream,
                consolidator=self.consolidator,
                sessions=self.sessions,
                memory=self.memory,
                jobs=self.jobs,
                config=self.settings.defaults.dream,
                idle_minutes=self.limits.idle_compact_after_minutes,
                history_tokens=self.budget.history_tokens,
            )
        )

    def tools_for(self, key: str) -> ToolRegistry:
        """The model's tools for one session (cached: the schema bytes must stay stable)."""
        registry = self._registries.get(key)
        if registry is None:
            from hippobot.agent.toolset import build_registry

            registry = build_registry(
                self.settings,
                workspace=self.paths,
                project=self.project,
                recall=self.recall,
                redactor=self.redactor,
                # the versioned store (and git) is loaded only when a file is written
                store_path=lambda rel: self.git.is_store_path(rel),
                session_key=key,
                private=self.private_paths,
                exec_enabled=self.exec_enabled,
                recalled=lambda: self.recalled_lines(key),
                replayed_from=lambda: self.prompts.in_view_during_turn(self.sessions.get(key)),
                asked=lambda: self.recalled_query(key),
            )
            self._registries[key] = registry
            if len(self._registries) > _REGISTRY_CACHE:  # a server may see many sessions
                self._registries.popitem(last=False)
        else:
            self._registries.move_to_end(key)
        return registry

    async def sandbox_problem(self) -> str | None:
        """Why ``exec`` would run without a sandbox here (None: it runs in one)."""
        from hippobot.tools.sandbox import Sandbox

        return await Sandbox(self.settings.config.tools.exec.sandbox).unavailable_reason(
            self.settings.env
        )

    def user_message(
        self, key: str, text: str, media: Sequence[str] = (), recalled: Recollection | None = None
    ) -> Message:
        """The user's message as it is stored and sent: the text (keys redacted) with its
        runtime context, which lists the memory ``recalled`` for it (also recorded, for
        ``/context``, in ``_recall``)."""
        channel, chat = split_key(key)
        lines = [self.redact(line) for line in recalled.lines()] if recalled is not None else []
        block = runtime_context_block(
            self._now(), self.settings.defaults.timezone, channel, chat, recalled=lines
        )
        content, marker = attach_runtime_context(self.redact(text), block)
        msg: Message = {"role": "user", "content": content, "_runtime_context": marker}
        if recalled is not None and recalled.mode != "off":
            msg["_recall"] = recalled.marker()
        if media:
            msg["media"] = [str(Path(p).expanduser().resolve()) for p in media]
        return msg

    def _counted_user_message(
        self, key: str, text: str, media: Sequence[str], recalled: Recollection | None = None
    ) -> Message:
        msg = self.user_message(key, text, media, recalled)
        if tokens.exact_loaded():  # cached: the prompt budget counts it again for free
            tokens.count_message(msg)  # (never worth loading the tables for before a reply)
        return msg

    def redact(self, text: str) -> str:
        return self.redactor(text)

    def _redact_call(self, call: ToolCall) -> ToolCall:
        """A stored copy of a tool call without secrets in its arguments.

        The tool itself runs with what the model sent; only the record (and so every later
        replay) is cleaned. JSON arguments are cleaned value by value so they stay JSON, and
        are left byte for byte alone when nothing needed removing.
        """
        function = call.get("function")
        args = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(args, str) or not isinstance(function, dict):
            return call
        try:
            value = json.loads(args)
        except ValueError:
            clean = self.redact(args)
        else:
            cleaned = _map_strings(value, self.redact)
            clean = args if cleaned == value else json.dumps(cleaned, ensure_ascii=False)
        if clean == args:
            return call
        return {**call, "function": {**function, "arguments": clean}}

    # --- the turn ----------------------------------------------------------------------

    async def turn(
        self,
        key: str,
        text: str,
        *,
        media: Sequence[str] = (),
        on_event: EventSink | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> TurnResult:
        """One model turn (a slash command is text like any other here: front ends route
        commands before calling this). ``max_tokens`` (capped by ``maxTokens``) and ``stop``
        override the configured reply limits for this turn's model calls (``hippobot serve``
        passes what its client asked for)."""
        validate_key(key)
        self.check_message(text)
        self.llm.check()  # no model configured: say so before anything is saved
        if media:
            from hippobot.context.images import load_image_block

            for path in media:  # fail before anything is saved: a clear error, nothing lost
                load_image_block(Path(path).expanduser())
        async with self._turn_lock(key, on_event):
            session = await self.sessions.current(key)  # read under the lock: current
            await self._prepare(session, on_event)
            recalled = await self._recall_for(session, text)  # before the message is in the index
            # Redacting and counting a long message take a while: not on the event loop. A
            # short one takes less than the trip to a worker thread and back.
            if media or len(text) > _INLINE_MESSAGE_CHARS:
                user = await asyncio.to_thread(self._counted_user_message, key, text, media, recalled)
            else:
                user = self._counted_user_message(key, text, media, recalled)
            # A message re-sent after a failed turn is answered from its stored copy: the
            # model sees the question once (docs/sessions.md).
            stored = session.unanswered(user)
            if stored is None:
                await self.sessions.append(session, user)
                user_number = len(session.messages) - 1
            else:
                user_number = max(i for i, m in enumerate(session.messages) if m is stored)
            request = self.prompts.prepare(session)
            runner = Runner(
                provider=self.provider,
                model=self.model,
                tools=request.tools,
                max_iterations=self.limits.max_iterations,
                # a request's own cap never raises the reply reserve the budget kept free
                max_tokens=min(max_tokens or self.budget.reply_reserve, self.budget.reply_reserve),
                temperature=self.llm.temperature,
                max_tool_result_chars=self.limits.max_tool_result_chars,
                stop=tuple(stop),
                prompt_size=_progress_size(
                    session, request,
                    fits=not self.budget.enabled or self.prompts.clearly_fits(session),
                ),
            )

            before: dict[str, bytes] | None = None  # versioned files before the first write

            async def persist(msg: Message) -> Message:
                nonlocal before
                if before is None and _may_write(msg):  # the tools run after this returns
                    before = await asyncio.to_thread(self._snapshot_before_tools)
                msg = scrubbed(msg)  # half an emoji from the model would wedge the session
                content = msg.get("content")
                if isinstance(content, str):
                    msg["content"] = self.redact(content)
                if msg.get("tool_calls"):
                    msg["tool_calls"] = [self._redact_call(c) for c in msg["tool_calls"]]
                (stored,) = await self.sessions.append(session, msg)
                return stored

            try:
                async with self.llm.chat_turn():  # background model requests wait meanwhile
                    result = await runner.run(request.messages, persist, on_event)
            except ProviderError as exc:  # an endpoint may echo the key it rejected
                exc.args = (self.redact(str(exc)), *exc.args[1:])
                raise
            if result.usage is not None:
                session.usage = SessionUsage(
                    prompt_tokens=result.usage.prompt_tokens,
                    completion_tokens=result.usage.completion_tokens,
                    cached_tokens=result.usage.cached_tokens,
                    messages_at=len(session.messages),
                    replay_start=session.replay_start,
                )
            await self.sessions.save_meta(session)
        journal, touched = None, set[str]()
        if before is not None:  # noted before the reply is shown, committed after it
            touched, journal = await asyncio.to_thread(
                self._journal_memory_edits, key, before, result.messages
            )
        if on_event is not None:  # the session is complete on disk: the reply can be shown
            on_event(ReplyDone(result.reply))
        if journal is not None:
            await asyncio.to_thread(self._commit_journal, journal)
        remembered = None
        if not touched:  # "remember that…" and the model wrote nothing: keep it ourselves
            remembered = await asyncio.to_thread(self._keep_if_asked, key, text, user_number)
            if remembered is not None and on_event is not None:
                on_event(Remembered(remembered))
        self._after_turn(session)
        return TurnResult(reply=result.reply, run=result, remembered=remembered)

    def _keep_if_asked(self, key: str, text: str, number: int) -> str | None:
        """When ``text`` asks to keep something, a pending ``[permanent]`` history entry in
        the user's own words, pointing at message ``number``; one line saying so (or None).
        See :mod:`hippobot.memory.remember` for why an entry rather than a file edit."""
        from hippobot.memory.remember import remember_entry, remember_request

        words = remember_request(self.redact(text))
        if words is None:
            return None
        try:
            entry = self.memory.append_history(
                remember_entry(words, f"session {key}#{number}"), session_key=key
            )
        except Exception as exc:  # the reply stands; say what was not kept
            log.warning("could not keep the request to remember: %s", exc)
            return f"could not keep this in memory ({exc}); ask again later"
        shown = words if len(words) <= 80 else words[:79] + "…"
        return f'kept in memory: "{shown}" (history#{entry.cursor}; Dream files it)'

    @cached_property
    def auto_recall(self) -> AutoRecall:
        """Recall before answering (``recall.auto``), on this workspace's index."""
        from hippobot.recall.auto import AutoRecall

        conf = self.settings.config.recall
        tokens_ = conf.auto_tokens if conf.auto else 0
        if self.budget.enabled:  # it is replayed with the message: a small window gets less
            tokens_ = min(tokens_, self.budget.input // _RECALL_BUDGET_DIVISOR)
            if tokens_ < _RECALL_MIN_TOKENS:  # not one hit's worth: every turn would archive
                tokens_ = 0
        return AutoRecall(
            self._recall_index,
            max_tokens=tokens_,
            min_score=conf.auto_min_score,
            timeout_s=conf.auto_timeout_s,
            include_other_sessions=self.settings.defaults.see_other_sessions,
        )

    def _recall_index(self) -> RecallIndex:
        with self._recall_lock:  # made in a worker thread, maybe by two turns at once
            return self.recall

    async def _recall_for(self, session: Session, text: str) -> Recollection | None:
        """The memory recalled for the message ``text`` (None when recall is off); kept
        for the session's tools, so memory_get can point back to it."""
        recall = self.auto_recall
        if not recall.enabled or not text.strip():
            self._recalled.pop(session.key, None)
            return None
        query = text if len(text) <= _RECALL_QUERY_CHARS else (
            text[: _RECALL_QUERY_CHARS // 2] + "\n" + text[-_RECALL_QUERY_CHARS // 2 :]
        )  # fmt: skip
        found = await recall.recall(
            query, session_key=session.key, shown=lambda: self.prompts.shown(session, text),
            replayed_from=self.prompts.surely_replayed_from(session),
        )
        self._recalled[session.key] = found
        while len(self._recalled) > _REGISTRY_CACHE:
            self._recalled.pop(next(iter(self._recalled)))
        return found

    def recalled_lines(self, key: str) -> list[str]:
        """The memory recalled for the latest message of session ``key`` in this process."""
        found = self._recalled.get(key)
        return [self.redact(line) for line in found.lines()] if found is not None else []

    def recalled_query(self, key: str) -> str:
        """The words recall searched for the latest message of session ``key`` ('' if none)."""
        found = self._recalled.get(key)
        return found.query if found is not None else ""

    def check_message(self, text: str) -> None:
        """A UserError when ``text`` is over ``maxMessageChars`` or is not valid Unicode."""
        problem = unencodable(text)
        if problem is not None:  # stored, it would fail every later request of the session
            raise UserError(f"the message cannot be sent: {problem}")
        limit = self.settings.defaults.max_message_chars
        if len(text) > limit:  # a huge message would be replayed and re-read on every turn
            raise UserError(
                f"the message is {len(text):,} characters; the limit is {limit:,} "
                "(agents.defaults.maxMessageChars). Save it to a file in the workspace and "
                "ask the agent to read it."
            )

    async def new_session(self, key: str) -> int:
        """``/new``: start the conversation afresh; the messages not yet archived are
        archived to history in the background. Returns how many are being archived."""
        session = await self.sessions.aget(key)
        async with self.sessions.lock(key):
            await self.sessions.refresh(session)
            end = len(session.messages)
            pending = end - session.last_consolidated
            session.fresh_start = end
            session.summary = None
            await self.sessions.save_meta(session)
        if pending > 0 and self.llm.configured():
            consolidator = self.consolidator  # the reply goes out first; the archive runs after
            self.jobs.schedule(  # its own key: a retry of an older failure may be running
                f"new:{key}", lambda: consolidator.archive_until(session, end, kind="new", force=True)
            )
            return pending
        return 0

    def resume_archives(self) -> None:
        """Retry, in the background, what waits to be archived in any session (a ``/new``
        whose archive a previous process did not finish, a consolidation that failed)."""
        if not self.read_only and self.llm.configured() and not self.jobs.running("resume-archives"):
            self.jobs.schedule("resume-archives", self.consolidator.resume_pending)

    def archiving(self) -> bool:
        """Whether an archive of this process is still running (a one-shot waits for it)."""
        archives = ("new:", "archive:", "idle:", "consolidate:", "resume-archives")
        return any(key.startswith(archives) for key in self.jobs.running_keys())

    @asynccontextmanager
    async def _turn_lock(self, key: str, on_event: EventSink | None) -> AsyncIterator[None]:
        """The per-key turn lock (SPEC 4.1), held across processes too.

        Without the file lock, a second hippobot process answering in the same session
        appends its turn in the middle of ours; a tool result separated from its call is
        then dropped from every later replay. The wait polls (a non-blocking ``flock``), so
        the event loop stays free and a cancelled turn never leaves the lock held.
        """
        async with self.sessions.lock(key):
            path = self.paths.turn_lock(key)
            try:
                try:
                    held = await acquire_async(path, timeout=0)  # usually free at once
                except LockTimeout:
                    if on_event is not None:
                        on_event(Notice("waiting for another hippobot process to finish here…"))
                    held = await acquire_async(path, timeout=TURN_LOCK_TIMEOUT_S)
            except LockTimeout:
                raise StorageError(
                    f"another hippobot process has been answering in session {key} "
                    f"for over {TURN_LOCK_TIMEOUT_S:.0f}s; try again when it is done"
                ) from None
            except OSError as exc:
                raise StorageError(
                    f"cannot lock {path}: {exc.strerror or exc}; nothing was written"
                ) from exc
            try:
                yield
            finally:
                held.release()

    async def _prepare(self, session: Session, on_event: EventSink | None) -> None:
        """Consolidate before the call only when the prompt would not fit at all."""
        from hippobot.lifecycle.slices import TurnGuard

        consolidator = self.consolidator
        consolidator.resume(session)  # a /new or a failed archive still waiting: retried aside
        if not self.budget.enabled:
            return
        self.check_window(session)
        if consolidator.idle_due(session):
            await consolidator.compact_idle(session, guard=TurnGuard.HELD)
        if consolidator.estimate(session) >= self.budget.input:
            if on_event:
                on_event(Notice("archiving older messages to make room…"))
            # The older messages would leave the prompt: archived raw if the summary fails.
            await consolidator.consolidate(session, guard=TurnGuard.HELD, last_resort=True)

    def _memory_snapshot(self) -> dict[str, bytes]:
        """The versioned files (memory and prompt files) as they are before a turn's tools
        run; a file not listed did not exist."""
        return self.git.working_files()

    def _snapshot_before_tools(self) -> dict[str, bytes]:
        """:meth:`_memory_snapshot`, after committing the edits of an earlier turn whose
        commit was left pending (a killed process), so they never count as this turn's or
        as hand edits."""
        self.versions.resume()
        return self._memory_snapshot()

    def _written_paths(self, messages: Sequence[Message]) -> set[Path]:
        """Files that a *successful* write_file/edit_file call of this turn wrote."""
        calls: dict[str, str] = {}
        for m in messages:
            for call in m.get("tool_calls") or ():
                function = call.get("function") or {}
                if function.get("name") in ("write_file", "edit_file"):
                    try:
                        path = json.loads(function.get("arguments") or "{}").get("path")
                    except (ValueError, AttributeError):
                        continue
                    if isinstance(path, str) and path:
                        calls[str(call.get("id"))] = path
        root = self.project or self.workspace
        written = set()
        for m in messages:
            path = calls.get(str(m.get("tool_call_id"))) if m.get("role") == "tool" else None
            content = m.get("content")
            if path is None or (isinstance(content, str) and content.startswith("Error")):
                continue
            try:
                written.add((root / Path(path).expanduser()).resolve())
            except (OSError, RuntimeError, ValueError):
                continue
        return written

    @cached_property
    def versions(self) -> ChatVersions:
        from hippobot.agent.chat_versions import ChatVersions

        return ChatVersions(self.paths, lambda: self.git)

    def _journal_memory_edits(
        self, key: str, before: dict[str, bytes], messages: Sequence[Message]
    ) -> tuple[set[str], Path | None]:
        """Active memory: what the model's successful edits changed is versioned, and only
        that (:mod:`hippobot.agent.chat_versions`); this notes it down before the reply is
        shown. After ``exec`` (which may write any file) every versioned file that changed
        during the turn counts as the model's."""
        try:
            git = self.git
            now = self._memory_snapshot()
            root = self.workspace.resolve()
            touched: set[str] = set()
            for path in self._written_paths(messages):
                try:
                    rel = path.relative_to(root).as_posix()
                except ValueError:
                    continue
                if git.is_store_path(rel):
                    touched.add(rel)
            if any(m.get("name") == "exec" for m in messages if m.get("role") == "tool"):
                touched |= {rel for rel in before.keys() | now.keys() if before.get(rel) != now.get(rel)}
            touched = {rel for rel in touched if now.get(rel) != before.get(rel)}
            # no memory file changed: nothing to version (and no history to start)
            return touched, self.versions.journal(key, before, touched)
        except Exception as exc:  # versioning must never break a chat
            log.warning("could not version the memory edit: %s", exc)
            return set(), None

    def _commit_journal(self, journal: Path) -> None:
        try:
            self.versions.commit(journal)
        except Exception as exc:  # stays pending: the next turn or run commits it
            log.warning("could not version the memory edit: %s", exc)

    def _fixed_prompt(self, session: Session) -> tuple[list[str], list[dict[str, Any]]]:
        """What every request carries whatever the memory: the texts of the identity, tool
        contract, skills list and active skills, the consolidation instruction its archive
        requests append (last), and the tool schemas."""
        from hippobot.prompts import render

        registry = self.tools_for(session.key)
        system = self.prompts.system_prompt(session, registry.names())
        texts = [
            s.text for s in system.sections
            if s.name in ("identity", "tool_contract", "skills", "active_skills")
        ]
        texts.append(render("consolidate.md", count=99, last_excerpt="x" * 60))
        return texts, registry.schemas()

    def fixed_prompt_tokens(self, session: Session, *, estimate: bool = False) -> int:
        """Tokens every request carries whatever the memory (:meth:`_fixed_prompt`).
        ``estimate``: the offline estimator's figure (no tokenizer tables loaded)."""
        count_text = tokens.estimate_text if estimate else tokens.count_text
        count_tools = tokens.estimate_tools if estimate else tokens.count_tools
        texts, schemas = self._fixed_prompt(session)
        *sections, instruction = texts
        return sum(count_text(t) + 4 for t in sections) + count_tools(schemas) + count_text(instruction)

    def check_window(self, session: Session) -> None:
        """A ConfigError naming the smallest workable window when the fixed prompt leaves no
        room for a conversation (checked once per process).

        No token is shorter than a byte, so the fixed prompt's UTF-8 size bounds its count
        from above for free: a window with room even for that passes at once. Else a window
        that fits a generous bound on the estimate (1.5x the offline estimator, which stays
        within ~15% of the tokenizer) passes without loading the tokenizer's tables, a few
        hundred milliseconds and ~30 MB before a one-shot's first request; only a tight
        window is counted exactly, and its error names exact figures."""
        if self._window_checked or not self.budget.enabled:
            return
        from hippobot.context.budget import MIN_CONVERSATION_TOKENS, check_window

        room = self.budget.input - self.budget.history_tokens
        texts, schemas = self._fixed_prompt(session)
        size = sum(len(t.encode("utf-8", "surrogatepass")) + 4 for t in texts)
        size += len(json.dumps(schemas, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if room - size < MIN_CONVERSATION_TOKENS:
            bound = int(self.fixed_prompt_tokens(session, estimate=True) * 1.5) + 64
            if room - bound < MIN_CONVERSATION_TOKENS:
                check_window(
                    self.budget, self.fixed_prompt_tokens(session),
                    "identity, tool contract, skills list, tool schemas, archive instruction",
                    config_path=str(self.settings.config_path),
                )
        self._window_checked = True

    def _after_turn(self, session: Session) -> None:
        from hippobot.recall.embedders import semantic_configured

        if self.versions.pending():  # left by a process killed after its reply
            self.jobs.schedule("versions", lambda: asyncio.to_thread(self.versions.resume))

        if semantic_configured(self.settings):  # vectors for what this turn added, off the turn
            batch = self.settings.config.recall.embeddings.batch_size
            recall = self.recall
            warning = recall.take_semantic_warning()  # from this turn's search or the last fill
            if warning and warning != self._semantic_warned:
                log.warning("%s", warning)
                self._semantic_warned = warning
            self.jobs.schedule(
                "recall:embed",
                lambda: asyncio.to_thread(recall.embed_pending, max_docs=2 * batch, batch_size=batch),
            )
        if self.consolidator.due(session):
            self.jobs.schedule(
                f"consolidate:{session.key}", lambda: self.consolidator.consolidate_locked(session.key)
            )

    async def aclose(self, timeout: float | None = 120.0) -> None:
        """Finish background work (consolidation, /new archiving) before the process exits."""
        await self.jobs.drain(timeout)
        await self.llm.aclose()
