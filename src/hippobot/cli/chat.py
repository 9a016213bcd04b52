"""Talking to the agent from a terminal: one shot, piped lines, or an interactive prompt.

Interactive chat renders the reply as Markdown (rich) while it streams; ``-m`` and piped
input print the reply's plain text, so scripts get exactly what the model wrote. While the
turn waits on the model, a live line on stderr (only when stderr is a terminal) says so:
``waiting for qwen2.5-coder-1.5b · 2,140 tokens · 37 s``, ``queued behind Dream · 12 s``
when another request of this hippobot home has the endpoint, ``retrying in 2 s · attempt 2
of 4`` after a failure, which also stays on the screen as a line of its own with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from hippobot.cli._common import start_over
from hippobot.errors import HippobotError, ProviderError, UserError
from hippobot.loop.events import (
    AgentEvent,
    ModelRetry,
    ModelWaiting,
    Notice,
    Remembered,
    ReplyDelta,
    ReplyDone,
    ReplyRestart,
    ToolFinished,
    ToolStarted,
)
from hippobot.workspace import Home

if TYPE_CHECKING:
    from hippobot.agent.agent import TurnResult
    from hippobot.agent.api import Api

__all__ = ["interactive", "one_shot", "piped"]

_EXIT_WORDS = {"exit", "quit", ":q", "/exit", "/quit"}
_DIM, _RESET, _YELLOW = "\033[2m", "\033[0m", "\033[33m"


def _seconds(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _dim_notice(text: str) -> None:
    """A line on stderr while the chat finishes its housekeeping (on a terminal only)."""
    if sys.stderr.isatty():
        sys.stderr.write(f"{_DIM}  · {text}{_RESET}\n")
        sys.stderr.flush()


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class _Progress:
    """The live line on stderr while a turn waits on the model; nothing when ``enabled`` is
    off. Its text is computed at each redraw (rich refreshes it several times a second), so
    the seconds count without a timer of our own."""

    def __init__(self, err: TextIO, *, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self._status: Any = None
        self._console: Any = None
        self._clock = clock
        self._state = "thinking"
        self._since = clock()
        self._model, self._tokens, self._behind = "", 0, ""
        self._retry = (0, 0)  # attempt, attempts
        if enabled:
            from rich.console import Console

            self._console = Console(file=err, force_terminal=True, highlight=False)

    # --- what the line says ---

    def text(self) -> str:
        now = self._clock()
        if self._state == "retrying":
            left = self._since - now
            if left > 0:
                attempt, attempts = self._retry
                return f"retrying in {_duration(left + 0.999)} · attempt {attempt} of {attempts}"
            self._state = "waiting"  # the retry went out when the wait ended
        elapsed = _duration(now - self._since)
        if self._state == "queued":
            return f"queued behind {self._behind} · {elapsed}"
        if self._state == "waiting":
            size = f" · {self._tokens:,} tokens" if self._tokens else ""
            return f"waiting for {self._model}{size} · {elapsed}"
        if self._state == "receiving":
            return f"receiving the reply from {self._model} · {elapsed}"
        return "thinking…"

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text())  # not markup: a model name may hold brackets

    def thinking(self) -> None:
        self._state, self._since = "thinking", self._clock()

    def waiting(self, ev: ModelWaiting) -> None:
        self._model, self._tokens = ev.model, ev.prompt_tokens
        self._state = "queued" if ev.behind else "waiting"
        self._behind = ev.behind or ""
        self._since = self._clock()

    def retrying(self, ev: ModelRetry) -> None:
        self._state, self._since, self._retry = "retrying", self._clock() + ev.wait, (ev.attempt, ev.attempts)

    def receiving(self) -> None:
        if self._state != "receiving":
            self._state = "receiving"  # the time keeps counting from the request

    # --- showing it ---

    @property
    def enabled(self) -> bool:
        return self._console is not None

    def start(self) -> None:
        if self._console is not None and self._status is None:
            self._status = self._console.status(self, spinner="dots")
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
    """Streams reply text to ``out``; tool steps, retries and notices go to ``err`` as dim
    lines, and ``progress`` shows the wait on the model.

    With ``markdown``, the streamed reply is rendered as Markdown instead of raw text.
    """

    def __init__(
        self, out: TextIO, err: TextIO, *, stream: bool, color: bool,
        markdown: _Markdown | None = None, progress: _Progress | None = None,
        on_done: Callable[[str], None] | None = None,
    ) -> None:
        self.out, self.err, self.stream, self.color = out, err, stream, color
        self.markdown = markdown
        self.progress = progress or _Progress(err, enabled=False)
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
        """A turn starts: show that it is working."""
        self.replied = False
        self.progress.thinking()
        self.progress.start()

    def finish(self) -> None:
        """The turn ended (reply, error or cancel): stop the progress line, close the reply."""
        self.progress.stop()
        if self.streamed:
            self._end_stream()

    def __call__(self, ev: AgentEvent) -> None:
        if isinstance(ev, ModelWaiting):
            self.progress.waiting(ev)
            self.progress.start()
            return
        if isinstance(ev, ReplyDelta) and not self.stream:
            self.progress.receiving()  # nothing is shown before the end: keep counting
            return
        self.progress.stop()
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
            self.progress.thinking()
            self.progress.start()  # the model reads the result next
        elif isinstance(ev, ModelRetry):
            if self.progress.enabled:  # elsewhere the final error says "after N attempts"
                self.err.write(self._dim(
                    f"  ↻ retrying in {_seconds(ev.wait)} s (attempt {ev.attempt} of {ev.attempts}): "
                    f"{ev.reason}"
                ) + "\n")
            self.progress.retrying(ev)
            self.progress.start()
        elif isinstance(ev, Notice):
            self.err.write(self._dim(f"  · {ev.text}") + "\n")
        elif isinstance(ev, Remembered):
            self._end_stream()
            self.err.write(self._dim(f"  ⚙ {ev.text}") + "\n")
        self.err.flush()


async def _one_turn(api: Api, key: str, text: str, media: Sequence[str], printer: _Printer,
                    on_event: Callable[[AgentEvent], None] | None = None) -> TurnResult:
    printer.begin()
    try:
        return await api.handle(key, text, media=media, on_event=on_event or printer)
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
                       progress=_Progress(sys.stderr, enabled=tty), on_done=show)

    def on_event(ev: AgentEvent) -> None:
        printer(ev)
        if not isinstance(ev, ModelWaiting):
            start_over()  # the model answers (text, a tool call, a retry): the start is over

    try:
        result = await _one_turn(api, key, message, media, printer, on_event)
        if not shown:  # a slash command: answered without a model turn
            show(result.reply, result.command)
    finally:
        start_over()
        await api.finish(_dim_notice)
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
        await api.finish(_dim_notice)
    return status


async def interactive(api: Api, key: str) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    home = api.settings.home
    home.mkdir(parents=True, exist_ok=True)
    prompt: PromptSession[str] = PromptSession(history=FileHistory(str(Home(home).input_history)))
    printer = _Printer(
        sys.stdout, sys.stderr, stream=True, color=True, markdown=_Markdown(sys.stdout),
        progress=_Progress(sys.stderr, enabled=sys.stderr.isatty()),
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
        await api.finish(_dim_notice)
    return 0
