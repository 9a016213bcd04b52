"""Slash commands (SPEC 4.5): which text is a command, and what each one does.

The front ends route a message here before it could become a model turn
(:meth:`hippobot.agent.api.Api.handle`); the agent itself never sees a command. The router
knows nothing of the agent: it parses the command and calls one operation of its
:class:`CommandTarget` (the facade), each returning the text shown in the chat.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hippobot.lazy_regex import lazy_compile

__all__ = ["COMMANDS", "CommandRouter", "CommandTarget", "is_command"]

_COMMAND = lazy_compile(r"^/([a-z][a-z-]*)(?:\s+(.*))?$", re.S | re.I)


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


def is_command(text: str, media: Sequence[str] = ()) -> bool:
    """Text the router answers instead of the model: it starts with ``/`` (``//`` escapes
    it, so ``//etc`` goes to the model as is) and carries no image."""
    return text.startswith("/") and not text.startswith("//") and not media


class CommandTarget(Protocol):
    """What the commands do, for one session key; every method returns the chat text."""

    async def chat_new(self, key: str) -> str: ...
    async def chat_status(self, key: str) -> str: ...
    async def chat_context(self, key: str, *, full: bool) -> str: ...
    async def chat_dream(self, *, dry_run: bool) -> str: ...
    async def chat_log(self, sha: str | None) -> str: ...
    async def chat_versions(self) -> str: ...
    async def chat_restore(self, sha: str) -> str: ...
    async def chat_dream_prompt(self, arg: str) -> str: ...
    async def chat_usage(self) -> str: ...


class CommandRouter:
    def __init__(self, target: CommandTarget) -> None:
        self.target = target
        self._handlers: dict[str, Callable[[str, str], Awaitable[str]]] = {
            "new": lambda key, arg: target.chat_new(key),
            "help": self._help,
            "status": lambda key, arg: target.chat_status(key),
            "context": lambda key, arg: target.chat_context(key, full=arg == "full"),
            "dream": lambda key, arg: target.chat_dream(dry_run=arg in ("--dry-run", "dry-run")),
            "dream-log": lambda key, arg: target.chat_log(arg or None),
            "dream-restore": self._dream_restore,
            "dream-prompt": lambda key, arg: target.chat_dream_prompt(arg),
            "usage": lambda key, arg: target.chat_usage(),
        }

    def parse(self, text: str) -> tuple[str, str] | None:
        """``(name, argument)`` when ``text`` is a command; ``None``: a message for the model."""
        m = _COMMAND.match(text.strip())
        if m is None:
            return None
        return m.group(1).lower(), (m.group(2) or "").strip()  # /NEW is /new

    async def run(self, key: str, command: tuple[str, str]) -> str:
        """The chat text answering a parsed command (an unknown name gets a pointer to /help)."""
        name, arg = command
        if name not in _NAMES:
            return f"Unknown command /{name}. Type /help to see the commands."
        return await self._handlers[name](key, arg)

    async def _help(self, key: str, arg: str) -> str:
        width = max(len(c.usage) for c in COMMANDS)
        lines = ["Commands:"]
        lines += [f"  {c.usage:<{width}}  {c.help}" for c in COMMANDS]
        lines.append("  exit, quit, Ctrl-D" + " " * max(0, width - 18) + "  leave (Ctrl-C cancels a running reply)")
        return "\n".join(lines)

    async def _dream_restore(self, key: str, arg: str) -> str:
        return await (self.target.chat_restore(arg) if arg else self.target.chat_versions())
