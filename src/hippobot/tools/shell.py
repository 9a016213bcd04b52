"""The ``exec`` tool: run a shell command with a timeout, an output cap and a deny-list.

Invariants:

* The command runs in a new session (its own process group) with stdin from /dev/null, so
  it cannot read the user's terminal, and a timeout or a cancelled turn kills the *whole*
  group (SIGTERM, then SIGKILL), children and background jobs included.
* Output is captured in bounded memory (a head and a tail per stream), however much the
  command prints, and returned capped to ``max_output_chars``.
* The child's environment never contains provider credentials or anything that looks like
  a secret (:func:`scrub_env`).
* The deny-list stops well-known destructive commands typed by mistake; it is a seat belt,
  not a sandbox, and does not try to defeat deliberate obfuscation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from hippobot.errors import ToolError
from hippobot.tools.base import Tool, ToolResult

__all__ = [
    "DEFAULT_DENY_PATTERNS",
    "DEFAULT_DENY_RULES",
    "MAX_EXEC_TIMEOUT",
    "DenyRule",
    "denied_reason",
    "exec_tool",
    "scrub_env",
    "truncate_middle",
]

MAX_EXEC_TIMEOUT = 600.0  # the most the model may ask for, unless the configured default is higher
_TERM_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
_DRAIN_GRACE = 1.0  # seconds to wait for pipes to close after the shell exited
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))

_SECRET_MARKERS = ("API_KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PRIVATE_KEY")
_SECRET_PREFIXES = ("HIPPOBOT_", "OPENAI_", "ANTHROPIC_", "OPENROUTER_", "DEEPSEEK_")


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` without credentials: names containing API_KEY, TOKEN, SECRET,
    PASSWORD, PASSWD or PRIVATE_KEY, or starting with HIPPOBOT_, OPENAI_, ANTHROPIC_,
    OPENROUTER_ or DEEPSEEK_ (case-insensitive)."""
    out: dict[str, str] = {}
    for name, value in env.items():
        upper = name.upper()
        if upper.startswith(_SECRET_PREFIXES) or any(m in upper for m in _SECRET_MARKERS):
            continue
        out[name] = value
    return out


# --- deny-list ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DenyRule:
    pattern: str
    reason: str


# Where a simple command starts: line start, after ; & | ( or `, optionally behind sudo.
_CMD = r"(?:^|[;&|(`]|\$\()\s*(?:sudo\s+(?:-\S+\s+)*)?"
# The rest of one simple command (does not cross ; & | or a newline).
_ARGS = r"[^;&|\n]*"
# A whole-system target: / or /* , a top-level system directory, or the home directory.
_ROOT_TARGET = (
    r"""\s["']?(?:/(?:bin|boot|dev|etc|home|lib|lib64|opt|root|sbin|srv|usr|var)?|~|\$HOME|\$\{HOME\})"""
    r"""/?\*?["']?(?=\s|$|[;&|)])"""
)
_RECURSIVE = r"(?=" + _ARGS + r"\s(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)(?:\s|$))"
_BLOCK_DEVICE = (
    r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|loop\d|md\d|dm-\d|mapper/)"
)

DEFAULT_DENY_RULES: tuple[DenyRule, ...] = (
    DenyRule(
        r"\brm\b" + _RECURSIVE + _ARGS + _ROOT_TARGET,
        "recursive rm of /, a system directory or the home directory",
    ),
    DenyRule(r"\bmk(?:e2)?fs(?:\.\w+)?\b", "creating a filesystem (mkfs)"),
    DenyRule(
        r"\bdd\b" + _ARGS + r"\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)", "dd onto a device"
    ),
    DenyRule(r">\s*" + _BLOCK_DEVICE, "writing to a block device"),
    DenyRule(
        r"\b(?:tee|shred|wipefs|blkdiscard)\b" + _ARGS + r"\s" + _BLOCK_DEVICE,
        "overwriting a block device",
    ),
    DenyRule(
        _CMD + r"(?:shutdown|reboot|halt|poweroff)\b", "shutting down or rebooting the machine"
    ),
    DenyRule(
        _CMD + r"(?:systemctl\s+(?:poweroff|reboot|halt|kexec)|(?:tel)?init\s+[06])\b",
        "shutting down or rebooting the machine",
    ),
    DenyRule(r":\s*\(\s*\)\s*\{", "a fork bomb"),
    DenyRule(r"\b(\w+)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&", "a fork bomb"),
    DenyRule(
        r"\bchmod\b" + _RECURSIVE + _ARGS + _ROOT_TARGET,
        "recursive chmod of / or a system directory",
    ),
    DenyRule(
        r"\bchown\b" + _RECURSIVE + _ARGS + _ROOT_TARGET,
        "recursive chown of / or a system directory",
    ),
    DenyRule(
        r"\bgit\b"
        + _ARGS
        + r"\bpush\b(?="
        + _ARGS
        + r"(?:\s--force\b|\s-f\b|\s\+))(?="
        + _ARGS
        + r"\b(?:main|master)\b)",
        "force-pushing to main/master",
    ),
    DenyRule(
        r"\b(?:curl|wget)\b[^;&\n]*\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b",
        "piping a download straight into a shell (save it to a file and read it first)",
    ),
)
DEFAULT_DENY_PATTERNS: tuple[str, ...] = tuple(r.pattern for r in DEFAULT_DENY_RULES)


def _compile_rules(patterns: Sequence[str] | None) -> list[tuple[re.Pattern[str], str]]:
    if patterns is None:
        return [(re.compile(r.pattern), r.reason) for r in DEFAULT_DENY_RULES]
    reasons = {r.pattern: r.reason for r in DEFAULT_DENY_RULES}
    return [(re.compile(p), reasons.get(p, f"matches the deny pattern {p!r}")) for p in patterns]


def denied_reason(command: str, patterns: Sequence[str] | None = None) -> str | None:
    """Why ``command`` is blocked by ``patterns`` (default: the built-in deny-list), or None."""
    return _first_hit(command, _compile_rules(patterns))


def _first_hit(command: str, rules: Sequence[tuple[re.Pattern[str], str]]) -> str | None:
    for regex, reason in rules:
        if regex.search(command):
            return reason
    return None


# --- output -------------------------------------------------------------------------


def truncate_middle(text: str, limit: int, *, already_omitted: int = 0) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail.

    ``already_omitted`` counts characters dropped from the middle before (added to the
    number the marker reports).
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail + already_omitted
    return f"{text[:head]}\n[... {omitted} chars omitted ...]\n{text[len(text) - tail :]}"


def _same(value: _Capture) -> _Capture:
    return value


class _Capture(asyncio.Protocol):
    """Collects one pipe into at most ``2 * limit`` bytes: the first and the last ``limit``.

    With ``limit`` at least 4 bytes per output character, a stream that overflowed decodes to
    more than twice the output cap, so the final middle cut always removes the place where
    bytes were dropped; ``dropped`` counts the characters lost there.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.limit
            while 0 < excess < len(self.tail) and 0x80 <= self.tail[excess] < 0xC0:
                excess += 1  # cut at a character boundary so the tail decodes cleanly
            if excess > 0:
                self.dropped += len(self.tail[:excess].translate(None, _UTF8_CONTINUATION))
                del self.tail[:excess]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.dropped:  # the seam is always inside the part truncate_middle cuts out
            return head + tail
        return (self.head + self.tail).decode("utf-8", errors="replace")


# --- running ------------------------------------------------------------------------


def exec_tool(
    *,
    cwd: Path,
    timeout: float = 60.0,
    max_output_chars: int = 16_000,
    deny_patterns: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Tool:
    """The ``exec`` tool. ``deny_patterns`` replaces the default deny-list (pass
    ``[*DEFAULT_DENY_PATTERNS, ...]`` to extend it); ``env`` defaults to this process's
    environment, scrubbed of secrets either way."""
    rules = _compile_rules(deny_patterns)
    child_env = scrub_env(os.environ if env is None else env)
    ceiling = max(timeout, MAX_EXEC_TIMEOUT)
    default_timeout = timeout  # the tool's own parameter shadows this one

    async def exec_(command: str, timeout: int | None = None) -> ToolResult:
        if not command.strip():
            raise ToolError("command is empty")
        if timeout is not None and timeout <= 0:
            raise ToolError("timeout must be a positive number of seconds")
        reason = _first_hit(command, rules)
        if reason is not None:
            raise ToolError(
                f"command blocked by the safety deny-list: {reason}. If this is really "
                "intended, ask the user to run it themselves."
            )
        seconds = min(float(timeout), ceiling) if timeout is not None else default_timeout
        return await _run(
            command, cwd=Path(cwd), timeout=seconds, env=child_env, cap=max_output_chars
        )

    exec_.__doc__ = f"""Run a shell command (bash -c) in the workspace and return its output and exit code.

        Args:
            command: The shell command line to run. stdin is empty; do not start interactive programs.
            timeout: Seconds before the command and its children are killed (default {timeout:g}, at most {ceiling:g}).
        """
    return Tool.from_function(exec_, name="exec")


def _shell(env: Mapping[str, str]) -> str:
    path = env.get("PATH") or os.defpath
    return shutil.which("bash", path=path) or shutil.which("sh", path=path) or "/bin/sh"


async def _run(
    command: str, *, cwd: Path, timeout: float, env: Mapping[str, str], cap: int
) -> ToolResult:
    if not cwd.is_dir():
        raise ToolError(f"the working directory {cwd} does not exist")
    loop = asyncio.get_running_loop()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            _shell(env), "-c", command,
            stdin=asyncio.subprocess.DEVNULL, stdout=out_w, stderr=err_w,
            cwd=cwd, env=dict(env), start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        os.close(out_r)
        os.close(err_r)
        raise ToolError(f"could not start the shell: {exc.strerror or exc}") from None
    finally:
        os.close(out_w)
        os.close(err_w)
    keep = 4 * cap + 4  # bytes per end: enough for cap characters of any UTF-8 text
    out_p, err_p = _Capture(keep), _Capture(keep)
    pipes = [(os.fdopen(out_r, "rb", 0), out_p), (os.fdopen(err_r, "rb", 0), err_p)]
    transports: list[asyncio.ReadTransport] = []
    timed_out = lingering = False
    try:
        for pipe, capture in pipes:
            transport, _ = await loop.connect_read_pipe(partial(_same, capture), pipe)
            transports.append(transport)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
            await _kill_group(proc)
        try:
            await asyncio.wait_for(asyncio.gather(out_p.closed, err_p.closed), _DRAIN_GRACE)
        except TimeoutError:
            lingering = True  # a background job inherited the pipes
    finally:
        if proc.returncode is None:  # cancelled mid-run: leave nothing behind
            _signal_group(proc.pid, signal.SIGKILL)
        for transport in transports:
            transport.close()  # also closes its pipe
        for pipe, _ in pipes[len(transports) :]:
            pipe.close()
    body = _format_output(out_p, err_p, cap)
    status = _status_line(proc.returncode, timed_out, timeout)
    if lingering:
        status += (
            "\n[background processes still hold the output open; their later output is not "
            "captured (redirect it to a file)]"
        )
    return ToolResult(f"{body}\n{status}", is_error=timed_out)


def _format_output(out: _Capture, err: _Capture, cap: int) -> str:
    stdout, stderr = out.text(), err.text()
    parts = []
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    if not parts:
        return "(no output)"
    return truncate_middle("\n".join(parts), cap, already_omitted=out.dropped + err.dropped)


def _status_line(returncode: int | None, timed_out: bool, timeout: float) -> str:
    if timed_out:
        return f"[timed out after {timeout:g} s; the command and its child processes were killed]"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"[killed by signal {name}]"
    return f"[exit code {returncode}]"


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the command's process group, then SIGKILL whatever is left of it."""
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), _TERM_GRACE)
    _signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
