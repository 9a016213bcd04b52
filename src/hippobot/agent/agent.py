"""The agent: composition root and the turn pipeline (SPEC 4.1).

A turn is a short pipeline of named steps — lock, refresh, save the user's message, build the
prompt, run the tool loop, record usage, schedule consolidation — and owns no storage details:
sessions, memory files, prompts and tools each live behind their own module.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hippobot.agent.background import BackgroundJobs
from hippobot.agent.budget import Budget, usage_estimate
from hippobot.agent.events import EventSink, Notice
from hippobot.agent.runner import Runner, RunResult
from hippobot.agent.wire import to_wire
from hippobot.config import Settings
from hippobot.context import tokens
from hippobot.context.builder import PromptInputs, SystemPrompt, build_system_prompt
from hippobot.context.loader import WorkspaceFiles
from hippobot.context.recent import RecentEntry, RecentSelection, select_recent_history
from hippobot.context.runtime import attach_runtime_context, runtime_context_block
from hippobot.context.skills import SkillsIndex
from hippobot.errors import ProviderError, StorageError, UserError
from hippobot.locks import LockTimeout, acquire_async
from hippobot.memory.redact import redact_exact, redact_secrets
from hippobot.memory.store import MemoryStore
from hippobot.messages import Message
from hippobot.session.keys import validate_key
from hippobot.session.manager import SessionManager
from hippobot.session.model import Session
from hippobot.session.store import JsonlSessionStore

if TYPE_CHECKING:
    from hippobot.lifecycle.consolidator import Consolidator
    from hippobot.lifecycle.dream import Dream
    from hippobot.memory.gitstore import GitStore
    from hippobot.providers.base import Provider
    from hippobot.providers.retry import RetryPolicy
    from hippobot.recall.index import RecallIndex
    from hippobot.tools.base import ToolRegistry

__all__ = ["Agent", "TurnResult", "split_key"]

log = logging.getLogger(__name__)

TURN_LOCK_TIMEOUT_S = 600.0
_REGISTRY_CACHE = 128


def _map_strings(value: Any, clean: Any) -> Any:
    """``value`` (parsed JSON) with ``clean`` applied to every string in it."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        return [_map_strings(v, clean) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, clean) for k, v in value.items()}
    return value


def split_key(key: str) -> tuple[str, str]:
    channel, _, chat = key.partition(":")
    return channel, chat or channel


@dataclass(slots=True)
class TurnResult:
    reply: str
    command: bool = False
    run: RunResult | None = None


class Agent:
    """One workspace, its sessions and memory, and a (lazily created) model."""

    def __init__(
        self,
        settings: Settings,
        *,
        provider: Provider | None = None,
        project: Path | None = None,
        now: Any = None,
    ) -> None:
        self.settings = settings
        self.workspace = settings.workspace
        self.project = project.resolve() if project else None
        self._provider = provider
        self._now = now or (lambda: datetime.now().astimezone())
        defaults = settings.defaults
        self.budget = Budget(
            context_window=defaults.context_window_tokens,
            max_tokens=defaults.max_tokens,
            threshold=defaults.consolidation_threshold,
            ratio=defaults.consolidation_ratio,
        )
        self.sessions = SessionManager(JsonlSessionStore(self.workspace))
        self.memory = MemoryStore(self.workspace, known_secrets=settings.secrets())
        self.files = WorkspaceFiles(
            self.workspace, self.project, max_file_chars=defaults.bootstrap_max_chars
        )
        self.skills = SkillsIndex(self.workspace, env=settings.env)
        self.jobs = BackgroundJobs()
        self._registries: OrderedDict[str, ToolRegistry] = OrderedDict()  # LRU, bounded
        self._wire_cache: dict[str, dict[int, tuple[Message, dict[str, Any]]]] = {}
        self._secrets = settings.secrets()
        self.retry_policy: RetryPolicy | None = None  # None: the provider's default policy
        self._window_checked = False

    # --- collaborators created on first use (keeps start-up fast) ---------------------

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            from hippobot.providers.factory import make_provider

            target = self.settings.model_target()
            self._provider = make_provider(
                target.kind,
                api_key=target.api_key,
                api_base=target.api_base,
                extra_headers=target.extra_headers,
                retry=self.retry_policy,
                name=target.provider,
            )
        return self._provider

    @property
    def model(self) -> str:
        return self.settings.model_target().model

    @cached_property
    def recall(self) -> RecallIndex:
        from hippobot.recall.index import RecallIndex

        return RecallIndex(self.workspace)

    @cached_property
    def consolidator(self) -> Consolidator:
        from hippobot.lifecycle.consolidator import Consolidator

        return Consolidator(self)

    @cached_property
    def git(self) -> GitStore:
        from hippobot.memory.gitstore import GitStore

        return GitStore(self.workspace)

    @cached_property
    def dream(self) -> Dream:
        from hippobot.lifecycle.dream import Dream

        return Dream(self)

    def versioning_state(self) -> str:
        git = self.git
        if not git.initialized:
            return "not started yet (the first Dream or memory edit creates the history)"
        if not git.available:
            return f"off ({git.broken_reason})"
        return f"on ({len(git.log(limit=1000))} versions)"

    def start_schedulers(self) -> list[asyncio.Task[None]]:
        """Background loops of a long-running process: Dream schedule, idle compaction."""
        from hippobot.lifecycle.schedule import start_schedulers

        return start_schedulers(self)

    def tools_for(self, key: str) -> ToolRegistry:
        """The model's tools for one session (cached: the schema bytes must stay stable)."""
        registry = self._registries.get(key)
        if registry is None:
            from hippobot.agent.toolset import build_registry

            registry = build_registry(self, key)
            self._registries[key] = registry
            if len(self._registries) > _REGISTRY_CACHE:  # a server may see many sessions
                evicted, _ = self._registries.popitem(last=False)
                self._wire_cache.pop(evicted, None)
        else:
            self._registries.move_to_end(key)
        return registry

    # --- prompt ------------------------------------------------------------------------

    def system_prompt(self, session: Session, tool_names: Sequence[str]) -> SystemPrompt:
        channel, _ = split_key(session.key)
        selection = self.recent_history(session.key)
        summary = session.summary.text if session.summary else None
        inputs = PromptInputs(
            workspace=self.workspace,
            project=self.project,
            bootstrap=self.files.bootstrap(),
            memory=self.files.memory(),
            skills=self.skills.skills(),
            recent_history=selection.entries,
            archived_summary=summary,
            tool_names=tuple(tool_names),
            channel=channel,
            model=self.model_label(),
            max_history_tokens=self.budget.history_tokens,
            recent_history_note=selection.note,
        )
        return build_system_prompt(inputs)

    def recent_history(self, key: str) -> RecentSelection:
        """What ``# Recent History`` shows in session ``key``: pending archive entries of
        this session and the durable lines of the others' (context.recent)."""
        pending = self.memory.read_history(after=self.memory.dream_cursor())
        return select_recent_history(
            [RecentEntry(e.cursor, e.timestamp, e.content, e.session_key) for e in pending],
            session_key=key,
            include_other_sessions=self.settings.defaults.see_other_sessions,
            max_tokens=self.budget.history_tokens,
        )

    def model_label(self) -> str:
        """The model name for display: configured or not, never an error."""
        try:
            return self.model
        except UserError:
            return self.settings.defaults.model

    def replay(self, session: Session, system: SystemPrompt, tools: list[dict[str, Any]]) -> list[Message]:
        """The stored messages replayed this turn, capped to what fits the input budget."""
        max_tokens = 0
        if self.budget.enabled and not self._clearly_fits(session):
            fixed = tokens.count_text(system.text) + tokens.count_tools(tools)
            max_tokens = max(256, self.budget.input - fixed)
        return session.get_history(
            max_messages=self.settings.defaults.max_history_messages,
            max_tokens=max_tokens,
            count_tokens=tokens.count_message if max_tokens else None,
        )

    def _clearly_fits(self, session: Session) -> bool:
        """True when the last request's reported size plus what came since is far below the
        budget: then the replay needs no token cap and nothing has to be counted exactly
        (which keeps a turn's cost independent of the session's length)."""
        size = usage_estimate(session, count=tokens.estimate_messages)
        return size is not None and size < 0.85 * self.budget.input

    def build_request_messages(self, session: Session) -> tuple[list[dict[str, Any]], ToolRegistry]:
        """The exact wire messages a turn on ``session`` would send now (also for /context)."""
        registry = self.tools_for(session.key)
        system = self.system_prompt(session, registry.names())
        history = self.replay(session, system, registry.schemas())
        # Stored messages never change, so each one's wire form is built once and reused
        # while it is replayed (the entry keeps the message alive, so ids are never confused).
        previous = self._wire_cache.get(session.key, {})
        current: dict[int, tuple[Message, dict[str, Any]]] = {}
        wire: list[dict[str, Any]] = [{"role": "system", "content": system.text}]
        for m in history:
            hit = previous.get(id(m))
            item = hit[1] if hit is not None and hit[0] is m else to_wire(m)
            current[id(m)] = (m, item)
            wire.append(item)
        self._wire_cache[session.key] = current
        return wire, registry

    def user_message(self, key: str, text: str, media: Sequence[str] = ()) -> Message:
        channel, chat = split_key(key)
        block = runtime_context_block(self._now(), self.settings.defaults.timezone, channel, chat)
        content, marker = attach_runtime_context(self.redact(text), block)
        msg: Message = {"role": "user", "content": content, "_runtime_context": marker}
        if media:
            msg["media"] = [str(Path(p).expanduser().resolve()) for p in media]
        return msg

    def _counted_user_message(self, key: str, text: str, media: Sequence[str]) -> Message:
        msg = self.user_message(key, text, media)
        tokens.count_message(msg)  # cached: the prompt budget counts it again for free
        return msg

    def redact(self, text: str) -> str:
        return redact_secrets(redact_exact(text, self._secrets))

    def _redact_call(self, call: dict[str, Any]) -> dict[str, Any]:
        """A stored copy of a tool call without secrets in its arguments.

        The tool itself runs with what the model sent; only the record (and so every later
        replay) is cleaned. JSON arguments are cleaned value by value so they stay JSON, and
        are left byte for byte alone when nothing needed removing.
        """
        function = call.get("function")
        args = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(args, str):
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
        """One turn. ``max_tokens`` (capped by ``maxTokens``) and ``stop`` override the
        configured reply limits for this turn's model calls (``hippobot serve`` passes what
        its client asked for)."""
        validate_key(key)
        if text.startswith("/") and not media and not text.startswith("//"):
            from hippobot.agent.commands import CommandRouter

            reply = await CommandRouter(self).dispatch(key, text.strip())
            if reply is not None:
                return TurnResult(reply=reply, command=True)
        self.settings.model_target()  # no model configured: say so before anything is saved
        if media:
            from hippobot.context.images import load_image_block

            for path in media:  # fail before anything is saved: a clear error, nothing lost
                load_image_block(Path(path).expanduser())
        session = self.sessions.get(key)
        async with self._turn_lock(key, on_event):
            await self.sessions.refresh(session)
            await self._prepare(session, on_event)
            # Redacting and counting a long message take a while: not on the event loop.
            user = await asyncio.to_thread(self._counted_user_message, key, text, media)
            await self.sessions.append(session, user)
            messages, registry = self.build_request_messages(session)
            runner = Runner(
                provider=self.provider,
                model=self.model,
                tools=registry,
                max_iterations=self.settings.defaults.max_tool_iterations,
                # a request's own cap never raises the reply reserve the budget kept free
                max_tokens=min(max_tokens or self.budget.reply_reserve, self.budget.reply_reserve),
                temperature=self.settings.defaults.temperature,
                max_tool_result_chars=self.settings.defaults.max_tool_result_chars,
                stop=tuple(stop),
            )

            async def persist(msg: Message) -> Message:
                if isinstance(msg.get("content"), str):
                    msg["content"] = self.redact(msg["content"])  # type: ignore[typeddict-item]
                if msg.get("tool_calls"):
                    msg["tool_calls"] = [self._redact_call(c) for c in msg["tool_calls"]]
                (stored,) = await self.sessions.append(session, msg)
                return stored

            before = await asyncio.to_thread(self._memory_snapshot)
            try:
                result = await runner.run(messages, persist, on_event)
            except ProviderError as exc:  # an endpoint may echo the key it rejected
                exc.args = (self.redact(str(exc)), *exc.args[1:])
                raise
            if result.usage is not None:
                session.usage = {
                    "prompt_tokens": result.usage.prompt_tokens,
                    "completion_tokens": result.usage.completion_tokens,
                    "cached_tokens": result.usage.cached_tokens,
                    "messages_at": len(session.messages),
                    "replay_start": session.replay_start,
                }
            await self.sessions.save_meta(session)
        written = self._written_paths(result.messages)
        if written:
            await asyncio.to_thread(self._commit_memory_edits, key, before, written)
        self._after_turn(session)
        return TurnResult(reply=result.reply, run=result)

    @asynccontextmanager
    async def _turn_lock(self, key: str, on_event: EventSink | None) -> AsyncIterator[None]:
        """The per-key turn lock (SPEC 4.1), held across processes too.

        Without the file lock, a second hippobot process answering in the same session
        appends its turn in the middle of ours; a tool result separated from its call is
        then dropped from every later replay. The wait polls (a non-blocking ``flock``), so
        the event loop stays free and a cancelled turn never leaves the lock held.
        """
        async with self.sessions.lock(key):
            digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]
            path = self.workspace / ".hippobot" / "locks" / f"turn-{digest}.lock"
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
        fresh = session.metadata.get("fresh_start")
        if isinstance(fresh, int) and session.last_consolidated < fresh:
            # A /new whose archiving did not finish before its process exited.
            key = f"archive:{session.key}"
            if not self.jobs.running(key):
                self.jobs.schedule(key, lambda: self.consolidator.archive_until(session, fresh))
        if not self.budget.enabled:
            return
        self.check_window(session)
        if self.consolidator.idle_due(session):
            await self.consolidator.compact_idle(session)
        if self.consolidator.estimate(session) >= self.budget.input:
            if on_event:
                on_event(Notice("archiving older messages to make room…"))
            await self.consolidator.consolidate(session)

    def _memory_snapshot(self) -> dict[str, bytes | None]:
        """The versioned memory files as they are before a turn's tools run."""
        out: dict[str, bytes | None] = {}
        for rel in self.git.store_paths:
            try:
                out[rel] = (self.workspace / rel).read_bytes()
            except OSError:
                out[rel] = None
        return out

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

    def _commit_memory_edits(
        self, key: str, before: dict[str, bytes | None], written: set[Path]
    ) -> None:
        """Active memory: what the model's successful edits changed is versioned at once, and
        only that. A hand edit not yet committed is committed first, on its own, as
        ``manual: edits before chat``, so undoing the chat commit never touches it."""
        from hippobot.lifecycle.versions import ensure_history

        git = self.git
        try:
            by_path = {(self.workspace / rel).resolve(): rel for rel in git.tracked}
            touched = {by_path[p] for p in written if p in by_path}
            now = self._memory_snapshot()
            touched = {rel for rel in touched if now.get(rel) != before.get(rel)}
            if not touched:
                return  # no memory file changed: nothing to version (and no history to start)
            ensure_history(git)
            if not git.available:
                return
            git.commit("manual: edits before chat", contents={rel: before[rel] for rel in touched})
            git.commit(f"memory: edited in chat ({key})")  # the manual commit holds the rest
        except Exception as exc:  # versioning must never break a chat
            log.warning("could not version the memory edit: %s", exc)

    def fixed_prompt_tokens(self, session: Session) -> int:
        """Tokens every request carries whatever the memory: identity, tool contract, skills
        list, tool schemas, plus the consolidation instruction its archive requests append."""
        from hippobot.prompts import render

        registry = self.tools_for(session.key)
        system = self.system_prompt(session, registry.names())
        fixed = sum(
            tokens.count_text(s.text) + 4
            for s in system.sections
            if s.name in ("identity", "tool_contract", "skills", "active_skills")
        )
        instruction = render("consolidate.md", count=99, last_excerpt="x" * 60)
        return fixed + tokens.count_tools(registry.schemas()) + tokens.count_text(instruction)

    def check_window(self, session: Session) -> None:
        """A ConfigError naming the smallest workable window when the fixed prompt leaves no
        room for a conversation (checked once per process)."""
        if self._window_checked or not self.budget.enabled:
            return
        from hippobot.agent.budget import check_window

        check_window(
            self.budget, self.fixed_prompt_tokens(session),
            "identity, tool contract, skills list, tool schemas, archive instruction",
            config_path=str(self.settings.config_path),
        )
        self._window_checked = True

    def _after_turn(self, session: Session) -> None:
        if self.consolidator.due(session):
            self.jobs.schedule(
                f"consolidate:{session.key}", lambda: self.consolidator.consolidate_locked(session.key)
            )

    async def aclose(self, timeout: float | None = 120.0) -> None:
        """Finish background work (consolidation, /new archiving) before the process exits."""
        await self.jobs.drain(timeout)
        close = getattr(self._provider, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception as exc:  # closing idle connections must not fail a shutdown
                log.debug("closing the provider failed: %s", exc)
