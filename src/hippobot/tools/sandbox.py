"""Where ``exec`` commands run: inside a bubblewrap sandbox when the platform allows.

With a sandbox (Linux, the ``bwrap`` program from the ``bubblewrap`` package, and user
namespaces allowed), a command sees:

* the whole filesystem read-only, with its own empty ``/tmp`` and a minimal ``/dev``;
* the workspace (and the selected project) writable, except their ``.git`` and
  ``.hippobot`` folders, which stay read-only (version history, git settings, locks);
* hippobot's home (``config.json`` with the keys, other workspaces) as an empty folder,
  apart from the workspace inside it;
* only its own processes (a new PID namespace): no ``/proc/<hippobot>/environ``, no
  signals to anything outside, and when the command ends or is killed, every process it
  started ends with it (``setsid`` or ``nohup`` cannot escape);
* the network, unchanged; and the scrubbed environment the caller passes.

Without one, the command runs as hippobot's user with the same scrubbed environment and
can read and write whatever that user can; :class:`Sandbox` then says so once, in a log
warning. ``mode`` is the config value ``tools.exec.sandbox``: ``"auto"`` (sandbox if it
works, else the warning), ``"bwrap"`` (refuse to run commands without it) or ``"none"``.
Whether bubblewrap works is probed once per process by running ``true`` in it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hippobot.errors import ToolError

__all__ = ["SANDBOX_MODES", "Sandbox", "SandboxMode", "bwrap_args"]

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: tuple[str, ...] = ("auto", "bwrap", "none")
READ_ONLY_INSIDE = (".git", ".hippobot")
_PROBE_TIMEOUT = 10.0
_probed: dict[str, str | None] = {}  # bwrap path -> None (works) or why not
_warned: set[str] = set()


def bwrap_args(
    bwrap: str,
    *,
    writable: Sequence[Path],
    hidden: Sequence[Path],
    cwd: Path,
) -> list[str]:
    """The bubblewrap command line (up to and including ``--``) for the layout above."""
    args = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--share-net",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
    ]  # fmt: skip
    for path in hidden:
        if path.is_dir() and path != Path("/"):
            args += ["--tmpfs", str(path)]
    for root in writable:
        if not root.is_dir():
            continue
        args += ["--bind", str(root), str(root)]
        for name in READ_ONLY_INSIDE:
            inner = root / name
            if inner.exists() and not inner.is_symlink():
                args += ["--ro-bind", str(inner), str(inner)]
    args += ["--chdir", str(cwd), "--"]
    return args


@dataclass
class Sandbox:
    """How ``exec`` wraps its shell; see the module docstring."""

    mode: SandboxMode = "auto"
    writable: Sequence[Path] = ()
    hidden: Sequence[Path] = ()
    bwrap: str | None = field(default=None)

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise ValueError(f"tools.exec.sandbox must be one of {', '.join(SANDBOX_MODES)}")
        self.writable = tuple(Path(os.path.realpath(p)) for p in self.writable)
        self.hidden = tuple(Path(os.path.realpath(p)) for p in self.hidden)

    async def prefix(self, cwd: Path, env: Mapping[str, str]) -> list[str]:
        """The argv to put before the shell: ``[]`` when running without a sandbox.

        Raises :class:`ToolError` in ``"bwrap"`` mode when the sandbox does not work.
        """
        if self.mode == "none":
            return []
        binary = self.bwrap or _find_bwrap(env)
        reason = "bubblewrap (bwrap) is not installed" if binary is None else None
        if binary is not None:
            reason = await _probe(binary, env)
        if reason is None and binary is not None:
            return bwrap_args(
                binary, writable=self.writable, hidden=self.hidden, cwd=Path(cwd).resolve()
            )
        if self.mode == "bwrap":
            raise ToolError(
                f"exec is configured to run only in a sandbox (tools.exec.sandbox = \"bwrap\"), "
                f"but {reason}; ask the user to install bubblewrap or change the setting"
            )
        _warn_once(str(reason))
        return []

    async def available(self, env: Mapping[str, str]) -> bool:
        """True when commands would run sandboxed."""
        binary = self.bwrap or _find_bwrap(env)
        return self.mode != "none" and binary is not None and await _probe(binary, env) is None


def _find_bwrap(env: Mapping[str, str]) -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    path = env.get("PATH") or os.defpath
    return shutil.which("bwrap", path=path) or shutil.which("bwrap", path="/usr/bin:/bin")


async def _probe(binary: str, env: Mapping[str, str]) -> str | None:
    """None when ``bwrap`` can start a sandbox here, else one line saying why not."""
    if binary in _probed:
        return _probed[binary]
    here = Path.cwd()
    argv = [*bwrap_args(binary, writable=(), hidden=(), cwd=Path("/")), "true"]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=here if here.is_dir() else "/",
        )
        _, err = await asyncio.wait_for(proc.communicate(), _PROBE_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        reason: str | None = f"bubblewrap could not start ({exc})"
    else:
        detail = err.decode("utf-8", "replace").strip().splitlines()
        reason = (
            None
            if proc.returncode == 0
            else f"bubblewrap cannot create a sandbox here ({detail[-1] if detail else proc.returncode})"
        )
    _probed[binary] = reason
    return reason


def _warn_once(reason: str) -> None:
    if reason in _warned:
        return
    _warned.add(reason)
    log.warning(
        "exec runs WITHOUT a sandbox: %s. Commands can read and write everything your user "
        "can, including hippobot's config.json and its API keys. Install bubblewrap, or set "
        'tools.exec.sandbox to "none" to silence this warning.',
        reason,
    )
