"""The ``exec`` tool: run a shell command with a timeout, an output cap and a deny-list.

Invariants:

* The command runs in a new session (its own process group) with stdin from /dev/null, so
  it cannot read the user's terminal. On Linux its shell is a *child subreaper*: a process
  the command starts stays its descendant even after leaving the group (``setsid``) and
  being orphaned (``(cmd &)``, ``nohup``, a daemon's double fork), whatever environment it
  clears. A timeout or a cancelled turn stops the shell (so nothing can be orphaned past
  it), sends SIGTERM to every descendant, and after a grace period SIGKILL to whatever is
  left, then kills the shell. Processes that carry the run's tag in their environment are
  killed too (the net elsewhere); in a sandbox, the PID namespace ends them all anyway. The
  tool result says "killed" only when nothing the command started is still running, and
  otherwise names what survived. A process handed to another service (``at``,
  ``systemd-run``, an already running ``tmux``) is not the command's descendant and is not
  seen.
* With a :class:`~hippobot.tools.sandbox.Sandbox`, the shell runs inside bubblewrap:
  workspace writable, everything else read-only, hippobot's home and processes out of
  sight (see that module).
* Output is captured in bounded memory (a head and a tail per stream), however much the
  command prints, and returned capped to ``max_output_chars``.
* The child's environment never contains provider credentials or anything that looks like
  a secret (:func:`scrub_env`).
* The deny-list stops well-known destructive commands (wiping the home directory from the
  workspace, ``find / -delete``, ``kill -9 -1``, piping a download into a shell); it is a
  seat belt, not a sandbox, and does not try to defeat deliberate obfuscation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from hippobot.errors import ToolError
from hippobot.tools.base import Tool, ToolResult
from hippobot.tools.sandbox import Sandbox

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
RUN_TAG = "HIPPOBOT_EXEC_ID"  # set in every command's environment, to find its processes

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
_END = r"""["']?(?=\s|$|[;&|)])"""
# Only parent-directory steps: "..", "../..", "../../*" (from the workspace, that is home).
_UP_TARGET = r"""\s["']?\.\.(?:/\.\.)*/?\*?""" + _END
# Everything in the current directory.
_HERE_TARGET = r"""\s["']?(?:\*|\.|\./|\./\*|\.\*)""" + _END
# A cd to /, a system directory, home or a parent, then (later on the line) a command.
_CD_ROOT = (
    r"""\bcd\s+["']?(?:/(?:bin|boot|dev|etc|home|lib|lib64|opt|root|sbin|srv|usr|var)?/?|~/?"""
    r"""|\$HOME/?|\$\{HOME\}/?|\.\.(?:/\.\.)*/?)["']?\s*(?:&&|;|\n|\|\|)"""
)
_WIDE_TARGET = r"(?:" + _ROOT_TARGET + r"|" + _UP_TARGET + r")"
_DOWNLOAD = r"\b(?:curl|wget|fetch)\b"
_INTERPRETER = (
    r"(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+(?:\w+=\S*\s+)*)?(?:\S*/)?"
    r"(?:(?:ba|z|da|k|fi|c|tc)?sh|python[0-9.]*|perl|ruby|node|php)\b"
)
_BLOCK_DEVICE = (
    r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|loop\d|md\d|dm-\d|mapper/)"
)

DEFAULT_DENY_RULES: tuple[DenyRule, ...] = (
    DenyRule(
        r"\brm\b" + _RECURSIVE + _ARGS + _WIDE_TARGET,
        "recursive rm of /, a system directory, the home directory or a parent directory",
    ),
    DenyRule(
        _CD_ROOT + r"[\s\S]*\brm\b" + _RECURSIVE + _ARGS + _HERE_TARGET,
        "recursive rm of everything after changing to /, home or a parent directory",
    ),
    DenyRule(
        r"\bfind\b" + _ARGS + _WIDE_TARGET + _ARGS + r"\s-(?:delete\b|exec(?:dir)?\s+rm\b)",
        "find deleting files under /, a system directory, home or a parent directory",
    ),
    DenyRule(
        _CD_ROOT + r"[\s\S]*\bfind\b" + _ARGS + r"\s-(?:delete\b|exec(?:dir)?\s+rm\b)",
        "find deleting files after changing to /, home or a parent directory",
    ),
    DenyRule(
        _CMD + r"(?:\S*/)?kill\b" + _ARGS + r"\s(?:--\s+)?-?1(?=\s*(?:$|[;&|)]))",
        "signalling every process (kill -1) or init (kill 1)",
    ),
    DenyRule(_CMD + r"(?:\S*/)?killall5\b", "signalling every process (killall5)"),
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
        _DOWNLOAD + r"[^;&\n]*\|\s*" + _INTERPRETER,
        "piping a download straight into a shell (save it to a file and read it first)",
    ),
    DenyRule(
        r"(?:\b(?:ba|z|da|k)?sh|\bsource|(?:^|[;&|(\s])\.|\beval|\bpython[0-9.]*|\bperl)"
        r"\s[^;&|\n]*(?:<\(|\$\(|`)\s*" + _DOWNLOAD,
        "running a download straight in a shell (save it to a file and read it first)",
    ),
)
DEFAULT_DENY_PATTERNS: tuple[str, ...] = tuple(r.pattern for r in DEFAULT_DENY_RULES)


@functools.cache
def _default_rules() -> tuple[tuple[re.Pattern[str], str], ...]:
    """The built-in deny-list, compiled once, at the first command checked: compiling it
    takes longer than a one-shot ``agent -m`` spends on anything else before its request."""
    return tuple((re.compile(r.pattern), r.reason) for r in DEFAULT_DENY_RULES)


def _compile_rules(patterns: Sequence[str] | None) -> Sequence[tuple[re.Pattern[str], str]]:
    if patterns is None:
        return _default_rules()
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
    sandbox: Sandbox | None = None,
) -> Tool:
    """The ``exec`` tool. ``deny_patterns`` replaces the default deny-list (pass
    ``[*DEFAULT_DENY_PATTERNS, ...]`` to extend it); ``env`` defaults to this process's
    environment, scrubbed of secrets either way; ``sandbox`` (default: none) says where
    commands run."""
    rules = None if deny_patterns is None else _compile_rules(deny_patterns)  # bad ones fail here
    child_env = scrub_env(os.environ if env is None else env)
    ceiling = max(timeout, MAX_EXEC_TIMEOUT)
    default_timeout = timeout  # the tool's own parameter shadows this one

    async def exec_(command: str, timeout: int | None = None) -> ToolResult:
        if not command.strip():
            raise ToolError("command is empty")
        if timeout is not None and timeout <= 0:
            raise ToolError("timeout must be a positive number of seconds")
        reason = _first_hit(command, _default_rules() if rules is None else rules)
        if reason is not None:
            raise ToolError(
                f"command blocked by the safety deny-list: {reason}. If this is really "
                "intended, ask the user to run it themselves."
            )
        seconds = min(float(timeout), ceiling) if timeout is not None else default_timeout
        prefix = await sandbox.prefix(Path(cwd), child_env) if sandbox is not None else []
        return await _run(
            command, cwd=Path(cwd), timeout=seconds, env=child_env, cap=max_output_chars,
            prefix=prefix,
        )  # fmt: skip

    exec_.__doc__ = f"""Run a shell command in the workspace. It runs with bash -c; its output and exit code come back.

        Args:
            command: The shell command line to run. stdin is empty; do not start interactive programs.
            timeout: Seconds before the command and its children are killed (default {timeout:g}, at most {ceiling:g}).
        """
    return Tool.from_function(exec_, name="exec")


def _shell(env: Mapping[str, str]) -> str:
    path = env.get("PATH") or os.defpath
    return shutil.which("bash", path=path) or shutil.which("sh", path=path) or "/bin/sh"


async def _run(
    command: str,
    *,
    cwd: Path,
    timeout: float,
    env: Mapping[str, str],
    cap: int,
    prefix: Sequence[str] = (),
) -> ToolResult:
    if not cwd.is_dir():
        raise ToolError(f"the working directory {cwd} does not exist")
    loop = asyncio.get_running_loop()
    tag = uuid.uuid4().hex
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *prefix, _shell(env), "-c", command,
            stdin=asyncio.subprocess.DEVNULL, stdout=out_w, stderr=err_w,
            cwd=cwd, env={**env, RUN_TAG: tag}, start_new_session=True,
            preexec_fn=_subreaper(),
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
    survivors: dict[int, str] = {}
    try:
        for pipe, capture in pipes:
            transport, _ = await loop.connect_read_pipe(partial(_same, capture), pipe)
            transports.append(transport)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
            survivors = await asyncio.to_thread(_end_everything, proc.pid, tag, _TERM_GRACE)
            await proc.wait()
        try:
            await asyncio.wait_for(asyncio.gather(out_p.closed, err_p.closed), _DRAIN_GRACE)
        except TimeoutError:
            lingering = True  # a background job inherited the pipes
    finally:
        if proc.returncode is None:  # cancelled mid-run: leave nothing behind
            _end_everything(proc.pid, tag, 0.0)  # a few /proc reads; must finish even now
        for transport in transports:
            transport.close()  # also closes its pipe
        for pipe, _ in pipes[len(transports) :]:
            pipe.close()
    body = _format_output(out_p, err_p, cap)
    status = _status_line(proc.returncode, timed_out, timeout, survivors)
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


def _status_line(
    returncode: int | None, timed_out: bool, timeout: float, survivors: Mapping[int, str]
) -> str:
    if timed_out and survivors:
        names = ", ".join(f"{pid} ({name})" for pid, name in sorted(survivors.items())[:10])
        return (
            f"[timed out after {timeout:g} s; the command was killed, but {len(survivors)} "
            f"process(es) it started could not be killed and are still running: {names}]"
        )
    if timed_out:
        return f"[timed out after {timeout:g} s; the command and its child processes were killed]"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"[killed by signal {name}]"
    return f"[exit code {returncode}]"


_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@functools.cache
def _subreaper() -> Callable[[], None] | None:
    """What the child runs between fork and exec to become a child subreaper (Linux), so
    that nothing the command starts is orphaned out of its reach; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int

    def become_subreaper() -> None:  # after fork: no imports, no allocation worth a lock
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    return become_subreaper


def _descendants(root: int) -> dict[int, str]:
    """The living (not zombie) descendants of ``root``, pid -> name, from ``/proc``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            head, _, rest = raw.rpartition(b")")
            fields = rest.split()
            if len(fields) < 2 or fields[0] in (b"Z", b"X"):
                continue
            pid = int(entry.name)
            children.setdefault(int(fields[1]), []).append(pid)
            names[pid] = head.partition(b"(")[2].decode("utf-8", "replace")
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found[child] = names[child]
                todo.append(child)
    return found


def _wait_stopped(pid: int, limit: float = 0.5) -> None:
    """Wait (briefly) until ``pid`` is stopped or gone."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[:1]
        except OSError:
            return
        if state in ([b"T"], [b"t"], [b"Z"], [b"X"]):
            return
        time.sleep(0.001)


def _end_everything(root: int, tag: str, grace: float) -> dict[int, str]:
    """End the command whose shell is ``root`` and all it started; returns what survived.

    The shell is stopped first: a subreaper that cannot exit keeps every orphan as its
    descendant, where the tree walk finds it. Blocking (sleeps while the grace runs).
    """
    _signal(root, signal.SIGSTOP)
    _wait_stopped(root)  # a signal sent before the stop takes effect could end the shell first
    for pid in _descendants(root):
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _descendants(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    left: dict[int, str] = {}
    for _ in range(100):  # a process may fork while we look; SIGKILL is final for each
        left = _descendants(root)
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.01)
    _signal_group(root, signal.SIGKILL)
    _signal(root, signal.SIGKILL)
    _kill_tagged(tag)
    return left


def _kill_tagged(tag: str) -> None:
    """SIGKILL every process whose environment carries this run's tag (Linux /proc).

    Finds what left the process group (``setsid``) and was orphaned; a process that
    cleared its environment is not found (the sandbox's PID namespace covers that).
    """
    needle = f"{RUN_TAG}={tag}".encode()
    for _ in range(3):  # a process may fork while we look
        found = False
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit() or int(entry.name) == os.getpid():
                    continue
                try:
                    with open(f"/proc/{entry.name}/environ", "rb") as fh:
                        environ = fh.read()
                except OSError:
                    continue
                if needle in environ.split(b"\0"):
                    found = True
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(entry.name), signal.SIGKILL)
        if not found:
            return


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
