"""Talking to the agent from a terminal: one shot, piped lines, or an interactive prompt.

Interactive chat renders the reply as Markdown (rich) while it streams; ``-m`` and piped
input print the reply's plain text, so scripts get exactly what the model wrote. While the
model works, a "thinking…" spinner runs on stderr, and only when stderr is a terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from hippobot.errors import HippobotError, ProviderError, UserError
from hippobot.loop.events import (
    AgentEvent,
    Notice,
    ReplyDelta,
    ReplyDone,
    ReplyRestart,
    ToolFinished,
    ToolStarted,
)

if TYPE_CHECKING:
    from hippobot.agent.agent import TurnResult
    from hippobot.agent.api import Api

__all__ = ["interactive", "one_shot", "piped"]

_EXIT_WORDS = {"exit", "quit", ":q", "/exit", "/quit"}
_DIM, _RESET, _YELLOW = "\033[2m", "\033[0m", "\033[33m"


class _Spinner:
    """A "thinking…" line on stderr while the model works; nothing when ``enabled`` is off."""

    def __init__(self, err: TextIO, *, enabled: bool) -> None:
        self._status: Any = None
        self._console: Any = None
        if enabled:
            from rich.console import Console

            self._console = Console(file=err, force_terminal=True, highlight=False)

    def start(self) -> None:
        if self._console is not None and self._status is None:
            self._status = self._console.status("thinking…", spinner="dots")
            self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


class _Markdown:
    """Renders the streamed reply as Markdown, updated in place as text arrives.

    Only the last screenful stays live; lines above it are printed for good, so a reply taller
    than the terminal scrolls normally instead of being redrawn (and duplicated) off-screen.
    Re-rendering is throttled; :meth:`close` draws the final state.
    """

    _INTERVAL = 0.1  # seconds between re-renders while text streams in

    def __init__(self, out: TextIO, *, force_terminal: bool | None = None) -> None:
        from rich.console import Console

        self.console = Console(file=out, force_terminal=force_terminal, highlight=False)
        self.text = ""
        self._live: Any = None
        self._printed = 0  # rendered lines already printed above the live region
        self._last = 0.0

    def feed(self, delta: str) -> None:
        self.text += delta
        if self._live is None:
            from rich.live import Live

            self._live = Live(
                console=self.console, auto_refresh=False, vertical_overflow="visible",
                redirect_stdout=False, redirect_stderr=False,
            )
            self._live.start()
        if time.monotonic() - self._last >= self._INTERVAL:
            self._render()

    def _render(self) -> None:
        from rich.markdown import Markdown
        from rich.segment import Segment, Segments

        self._last = time.monotonic()
        lines = self.console.render_lines(Markdown(self.text), pad=False, new_lines=False)
        keep = max(4, self.console.height - 4)
        stable = max(self._printed, len(lines) - keep)

        def segments(rows: list[list[Segment]]) -> Segments:
            return Segments([seg for row in rows for seg in (*row, Segment.line())])

        if stable > self._printed:
            self._live.console.print(segments(lines[self._printed : stable]), end="")
            self._printed = stable
        self._live.update(segments(lines[self._printed :]), refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._render()
            self._live.stop()
            self._live = None
        self.text, self._printed = "", 0


class _Printer:
    """Streams reply text to ``out``; tool steps and notices go to ``err`` as dim lines.

    With ``markdown``, the streamed reply is rendered as Markdown instead of raw text.
    """

    def __init__(
        self, out: TextIO, err: TextIO, *, stream: bool, color: bool,
        markdown: _Markdown | None = None, spinner: _Spinner | None = None,
        on_done: Callable[[str], None] | None = None,
    ) -> None:
        self.out, self.err, self.stream, self.color = out, err, stream, color
        self.markdown = markdown
        self.spinner = spinner or _Spinner(err, enabled=False)
        self.on_done = on_done  # shows the final reply the moment the session holds it
        self.streamed = False
        self.replied = False  # the final reply was shown as it streamed

    def _dim(self, text: str) -> str:
        return f"{_DIM}{text}{_RESET}" if self.color else text

    def _end_stream(self) -> None:
        if self.markdown is not None:
            self.markdown.close()
        elif self.streamed:
            self.out.write("\n")
        self.streamed = False

    def begin(self) -> None:
        """A turn starts: show that the model is working."""
        self.replied = False
        self.spinner.start()

    def finish(self) -> None:
        """The turn ended (reply, error or cancel): stop the spinner and close the reply."""
        self.spinner.stop()
        if self.streamed:
            self._end_stream()

    def __call__(self, ev: AgentEvent) -> None:
        self.spinner.stop()
        if isinstance(ev, ReplyDone):
            if self.on_done is not None:
                self.on_done(ev.text)
            return
        if isinstance(ev, ReplyDelta) and self.stream:
            if self.markdown is not None:
                self.markdown.feed(ev.text)
            else:
                self.out.write(ev.text)
                self.out.flush()
            self.streamed = self.replied = True
            return
        if isinstance(ev, ReplyRestart):
            self._end_stream()
            self.replied = False
            self.err.write(self._dim("  ↻ the reply was cut off; retrying…") + "\n")
        elif isinstance(ev, ToolStarted):
            self._end_stream()
            self.replied = False
            self.err.write(self._dim(f"  ⚙ {ev.summary}") + "\n")
        elif isinstance(ev, ToolFinished):
            if not ev.ok:
                self.err.write(self._dim(f"  ✗ {ev.name} failed") + "\n")
            self.spinner.start()  # the model reads the result next
        elif isinstance(ev, Notice):
            self.err.write(self._dim(f"  · {ev.text}") + "\n")
        self.err.flush()


async def _one_turn(api: Api, key: str, text: str, media: Sequence[str], printer: _Printer) -> TurnResult:
    printer.begin()
    try:
        return await api.handle(key, text, media=media, on_event=printer)
    finally:
        printer.finish()


async def one_shot(api: Api, key: str, message: str, media: Sequence[str], *, as_json: bool = False) -> int:
    """``hippobot agent -m``: only the reply goes to stdout (``--json``: reply and session).

    The reply is written and flushed as soon as the session holds it; what follows a turn
    (versioning memory edits, a due consolidation, the auto-Dream check) runs after it, so a
    script reading stdout has its answer first, and a kill at that point loses nothing (work
    left over is picked up by the next run)."""
    tty = sys.stderr.isatty()
    shown: list[str] = []

    def show(reply: str, command: bool = False) -> None:
        if as_json:
            import json

            data = {"session": key, "reply": reply, "command": command}
            sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(reply.rstrip("\n") + "\n")
        sys.stdout.flush()
        shown.append(reply)

    printer = _Printer(sys.stdout, sys.stderr, stream=False, color=tty,
                       spinner=_Spinner(sys.stderr, enabled=tty), on_done=show)
    try:
        result = await _one_turn(api, key, message, media, printer)
        if not shown:  # a slash command: answered without a model turn
            show(result.reply, result.command)
    finally:
        await api.finish()
    return 0


async def piped(api: Api, key: str, lines: TextIO) -> int:
    """Non-terminal stdin: one message per line, each reply printed in turn."""
    printer = _Printer(sys.stdout, sys.stderr, stream=False, color=False)
    status = 0
    if hasattr(lines, "reconfigure"):  # bytes that are not UTF-8: one error line, not a traceback
        lines.reconfigure(errors="surrogateescape")
    try:
        for line in lines:
            text = line.rstrip("\n")
            if not text.strip():
                continue
            if text.strip().lower() in _EXIT_WORDS:
                break
            try:
                reply = (await _one_turn(api, key, text, (), printer)).reply
            except (ProviderError, UserError) as exc:
                sys.stderr.write(f"error: {exc}\n")
                status = 1
                continue
            sys.stdout.write(reply.rstrip("\n") + "\n")
            sys.stdout.flush()
    finally:
        await api.finish()
    return status


async def interactive(api: Api, key: str) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    home = api.settings.home
    home.mkdir(parents=True, exist_ok=True)
    prompt: PromptSession[str] = PromptSession(history=FileHistory(str(home / ".input_history")))
    printer = _Printer(
        sys.stdout, sys.stderr, stream=True, color=True, markdown=_Markdown(sys.stdout),
        spinner=_Spinner(sys.stderr, enabled=sys.stderr.isatty()),
    )
    sys.stderr.write(
        f"{_DIM}hippobot — session {key} — /help for commands, Ctrl-D to leave{_RESET}\n"
    )
    schedulers = api.start_schedulers()
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
            task = asyncio.create_task(_one_turn(api, key, text, (), printer))
            # Ctrl-C while a reply runs cancels that turn, not the program.
            loop = asyncio.get_running_loop()
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGINT, task.cancel)
            try:
                result = await task
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
            if result.command or printer.markdown is None:
                sys.stdout.write(result.reply.rstrip("\n") + "\n")  # tables keep their columns
            elif not printer.replied and result.reply.strip():
                from rich.markdown import Markdown

                printer.markdown.console.print(Markdown(result.reply))
            sys.stdout.flush()
    finally:
        for job in schedulers:
            job.cancel()
        await api.finish()
    return 0
