"""Talking to the agent from a terminal: one shot, piped lines, or an interactive prompt."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from hippobot.errors import HippobotError, ProviderError, UserError
from hippobot.loop.events import (
    AgentEvent,
    Notice,
    ReplyDelta,
    ReplyRestart,
    ToolFinished,
    ToolStarted,
)

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent

__all__ = ["interactive", "one_shot", "piped"]

_EXIT_WORDS = {"exit", "quit", ":q", "/exit", "/quit"}
_DIM, _RESET, _YELLOW = "\033[2m", "\033[0m", "\033[33m"


class _Printer:
    """Streams reply text to ``out``; tool steps and notices go to ``err`` as dim lines."""

    def __init__(self, out: TextIO, err: TextIO, *, stream: bool, color: bool) -> None:
        self.out, self.err, self.stream, self.color = out, err, stream, color
        self.streamed = False

    def _dim(self, text: str) -> str:
        return f"{_DIM}{text}{_RESET}" if self.color else text

    def __call__(self, ev: AgentEvent) -> None:
        if isinstance(ev, ReplyDelta) and self.stream:
            self.out.write(ev.text)
            self.out.flush()
            self.streamed = True
        elif isinstance(ev, ReplyRestart):
            if self.streamed:
                self.out.write("\n")
            self.err.write(self._dim("  ↻ the reply was cut off; retrying…") + "\n")
            self.streamed = False
        elif isinstance(ev, ToolStarted):
            if self.streamed:
                self.out.write("\n")
                self.streamed = False
            self.err.write(self._dim(f"  ⚙ {ev.summary}") + "\n")
        elif isinstance(ev, ToolFinished) and not ev.ok:
            self.err.write(self._dim(f"  ✗ {ev.name} failed") + "\n")
        elif isinstance(ev, Notice):
            self.err.write(self._dim(f"  · {ev.text}") + "\n")
        self.err.flush()


async def _one_turn(agent: Agent, key: str, text: str, media: Sequence[str], printer: _Printer) -> str:
    result = await agent.turn(key, text, media=media, on_event=printer)
    return result.reply


async def one_shot(agent: Agent, key: str, message: str, media: Sequence[str]) -> int:
    """``hippobot agent -m``: only the reply goes to stdout."""
    printer = _Printer(sys.stdout, sys.stderr, stream=False, color=sys.stderr.isatty())
    try:
        reply = await _one_turn(agent, key, message, media, printer)
    finally:
        await _finish(agent)
    sys.stdout.write(reply.rstrip("\n") + "\n")
    return 0


async def piped(agent: Agent, key: str, lines: TextIO) -> int:
    """Non-terminal stdin: one message per line, each reply printed in turn."""
    printer = _Printer(sys.stdout, sys.stderr, stream=False, color=False)
    status = 0
    try:
        for line in lines:
            text = line.rstrip("\n")
            if not text.strip():
                continue
            if text.strip().lower() in _EXIT_WORDS:
                break
            try:
                reply = await _one_turn(agent, key, text, (), printer)
            except ProviderError as exc:
                sys.stderr.write(f"error: {exc}\n")
                status = 1
                continue
            sys.stdout.write(reply.rstrip("\n") + "\n")
            sys.stdout.flush()
    finally:
        await _finish(agent)
    return status


async def _finish(agent: Agent) -> None:
    """Let background archiving finish (bounded); what does not finish resumes next start.

    Then, if pending facts are about to outgrow Recent History, start Dream detached, so
    a one-shot run never makes the user wait for it (lifecycle.autodream).
    """
    with contextlib.suppress(Exception):
        await agent.aclose(timeout=60.0)
    with contextlib.suppress(Exception):
        _dream_if_due(agent)


def _dream_if_due(agent: Agent) -> None:
    from hippobot.lifecycle.autodream import dream_due, spawn_background_dream

    if not agent.settings.defaults.dream.auto or not agent.settings.model_configured():
        return
    if dream_due(agent.memory, agent.budget.history_tokens) is not None:
        spawn_background_dream(agent.workspace)


async def interactive(agent: Agent, key: str) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    agent.settings.home.mkdir(parents=True, exist_ok=True)
    prompt: PromptSession[str] = PromptSession(history=FileHistory(str(agent.settings.home / ".input_history")))
    printer = _Printer(sys.stdout, sys.stderr, stream=True, color=True)
    sys.stderr.write(
        f"{_DIM}hippobot — session {key} — /help for commands, Ctrl-D to leave{_RESET}\n"
    )
    schedulers = agent.start_schedulers()
    try:
        while True:
            try:
                text = await prompt.prompt_async("› ")
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt clears the line
            except EOFError:
                break
            if not text.strip():
                continue
            if text.strip().lower() in _EXIT_WORDS:
                break
            task = asyncio.create_task(_one_turn(agent, key, text, (), printer))
            # Ctrl-C while a reply runs cancels that turn, not the program.
            loop = asyncio.get_running_loop()
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGINT, task.cancel)
            try:
                reply = await task
            except asyncio.CancelledError:
                sys.stderr.write(f"\n{_YELLOW}cancelled — your message is kept in the session{_RESET}\n")
                printer.streamed = False
                continue
            except (UserError, ProviderError) as exc:
                sys.stderr.write(f"{_YELLOW}error: {exc}{_RESET}\n")
                continue
            except HippobotError as exc:
                sys.stderr.write(f"{_YELLOW}error: {exc}{_RESET}\n")
                continue
            finally:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signal.SIGINT)
            if printer.streamed:
                sys.stdout.write("\n")
                printer.streamed = False
            else:
                sys.stdout.write(reply.rstrip("\n") + "\n")
            sys.stdout.flush()
    finally:
        for job in schedulers:
            job.cancel()
        await _finish(agent)
    return 0
