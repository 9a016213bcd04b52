"""Slash commands (SPEC 4.5). Each handler returns the text shown to the user."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent

__all__ = ["COMMANDS", "CommandRouter"]

_COMMAND = re.compile(r"^/([a-z][a-z-]*)(?:\s+(.*))?$", re.S | re.I)


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    usage: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("new", "/new", "archive this conversation and start a fresh one"),
    Command("help", "/help", "list commands"),
    Command("status", "/status", "model, session, tokens used vs budget, pending memory"),
    Command("context", "/context", "what the model sees: prompt sections and their token counts"),
    Command("dream", "/dream", "distil pending history into SOUL.md, USER.md and MEMORY.md now"),
    Command("dream-log", "/dream-log [sha]", "show the latest (or given) memory change as a diff"),
    Command("dream-restore", "/dream-restore [sha]", "list memory versions, or undo one change"),
    Command("dream-prompt", "/dream-prompt [init]", "show the Dream guide, or create an editable one"),
    Command("usage", "/usage", "model requests and tokens per day and job (turns, consolidation, Dream)"),
)
_NAMES = {c.name for c in COMMANDS}


class CommandRouter:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._handlers: dict[str, Callable[[str, str], Awaitable[str]]] = {
            "new": self._new,
            "help": self._help,
            "status": self._status,
            "context": self._context,
            "dream": self._dream,
            "dream-log": self._dream_log,
            "dream-restore": self._dream_restore,
            "dream-prompt": self._dream_prompt,
            "usage": self._usage,
        }

    async def dispatch(self, key: str, text: str) -> str | None:
        """Handle ``text`` if it is a command; ``None`` means it is a message for the model."""
        m = _COMMAND.match(text.strip())
        if m is None:
            return None
        name, arg = m.group(1).lower(), (m.group(2) or "").strip()  # /NEW is /new
        if name not in _NAMES:
            return f"Unknown command /{name}. Type /help to see the commands."
        return await self._handlers[name](key, arg)

    async def _help(self, key: str, arg: str) -> str:
        width = max(len(c.usage) for c in COMMANDS)
        lines = ["Commands:"]
        lines += [f"  {c.usage:<{width}}  {c.help}" for c in COMMANDS]
        lines.append("  exit, quit, Ctrl-D" + " " * max(0, width - 18) + "  leave (Ctrl-C cancels a running reply)")
        return "\n".join(lines)

    async def _new(self, key: str, arg: str) -> str:
        agent = self.agent
        session = await agent.sessions.aget(key)
        async with agent.sessions.lock(key):
            await agent.sessions.refresh(session)
            end = len(session.messages)
            pending = end - session.last_consolidated
            session.fresh_start = end
            session.summary = None
            await agent.sessions.save_meta(session)
        if pending > 0 and agent.llm.configured():
            agent.jobs.schedule(
                f"archive:{key}", lambda: agent.consolidator.archive_until(session, end)
            )
            return f"New session started. The previous {pending} message(s) are being archived to memory."
        return "New session started."

    async def _status(self, key: str, arg: str) -> str:
        from hippobot.agent.inspect import status_report

        await self.agent.sessions.aget(key)  # loaded off the loop; the report reads it cached
        return status_report(self.agent, key).to_text()

    async def _context(self, key: str, arg: str) -> str:
        from hippobot.agent.inspect import context_report

        await self.agent.sessions.aget(key)  # loaded off the loop; the report reads it cached
        return context_report(self.agent, key).to_text(full=arg == "full")

    async def _dream(self, key: str, arg: str) -> str:
        result = await self.agent.dream.run(dry_run=arg in ("--dry-run", "dry-run"))
        return result.describe()

    async def _dream_log(self, key: str, arg: str) -> str:
        from hippobot.lifecycle.versions import describe_log

        return await asyncio.to_thread(describe_log, self.agent.git, arg or None)

    async def _dream_restore(self, key: str, arg: str) -> str:
        from hippobot.lifecycle.versions import describe_restore, list_versions

        if not arg:
            return await asyncio.to_thread(list_versions, self.agent.git)
        git, memory = self.agent.git, self.agent.memory

        def restore() -> str:
            return describe_restore(git, arg, after_cursor=memory.last_cursor())

        return await asyncio.to_thread(restore)

    async def _dream_prompt(self, key: str, arg: str) -> str:
        from hippobot.lifecycle.dream import dream_prompt_command

        return await asyncio.to_thread(dream_prompt_command, self.agent.dream, arg)

    async def _usage(self, key: str, arg: str) -> str:
        from hippobot.usage_ledger import UsageLedger, format_table, summarise

        ledger = UsageLedger.for_workspace(self.agent.workspace)
        rows = await asyncio.to_thread(lambda: summarise(ledger.read()))
        return format_table(rows, path=ledger.path)
