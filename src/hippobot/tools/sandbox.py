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
* no capabilities at all (``--cap-drop ALL``) in a user namespace of its own where the
  system allows one (``--unshare-user``, and ``--disable-userns`` where bubblewrap has it, so
  the command cannot make a namespace with capabilities of its own either): even as root
  (many Docker setups), a command cannot unmount what hides hippobot's home, lift the
  read-only binds or remount ``/`` writable;
* the network, unchanged; and the scrubbed environment the caller passes.

Without one, the command runs as hippobot's user with the same scrubbed environment and
can read and write whatever that user can; :class:`Sandbox` then says so once, in a log
warning. ``mode`` is the config value ``tools.exec.sandbox``: ``"auto"`` (sandbox if it
works, else the warning), ``"bwrap"`` (refuse to run commands without it) or ``"none"``.
Whether bubblewrap works, and which of those hardening options it accepts, is probed once
per process by starting a sandbox that reports its effective capabilities (they must be 0).
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
from hippobot.workspace import PROTECTED_DIRS

__all__ = ["SANDBOX_MODES", "Sandbox", "SandboxMode", "bwrap_args"]

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: tuple[str, ...] = ("auto", "bwrap", "none")
READ_ONLY_INSIDE = PROTECTED_DIRS
_PROBE_TIMEOUT = 10.0
# The strongest first: a user namespace in which the command may not make another, then a
# user namespace alone (bubblewrap before 0.8), then none (setuid bubblewrap, user
# namespaces switched off). Capabilities are dropped in every variant.
HARDENING: tuple[tuple[str, ...], ...] = (
    ("--unshare-user", "--disable-userns"),
    ("--unshare-user",),
    (),
)
_CAPS_DROPPED = ("--cap-drop", "ALL")
# bwrap path -> (None, the hardening that works) or (why not, ())
_probed: dict[str, tuple[str | None, tuple[str, ...]]] = {}
_warned: set[str] = set()
_REPORT_CAPS = 'while read -r k v; do [ "$k" = CapEff: ] && echo "$v"; done < /proc/self/status; exit 0'


def bwrap_args(
    bwrap: str,
    *,
    writable: Sequence[Path],
    hidden: Sequence[Path],
    cwd: Path,
    hardening: Sequence[str] = HARDENING[0],
) -> list[str]:
    """The bubblewrap command line (up to and including ``--``) for the layout above.

    ``hidden`` folders become empty; one that lies inside a writable root is hidden after
    that root is bound, so binding the workspace cannot show it again."""
    args = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        *hardening,
        "--share-net",
        *_CAPS_DROPPED,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
    ]  # fmt: skip
    roots = [root for root in writable if root.is_dir()]
    covered = [p for p in hidden if p.is_dir() and p != Path("/") and p not in roots]
    inside = [p for p in covered if any(p.is_relative_to(r) for r in roots)]
    for path in covered:
        if path not in inside:
            args += ["--tmpfs", str(path)]
    for root in roots:
        args += ["--bind", str(root), str(root)]
        for name in READ_ONLY_INSIDE:
            inner = root / name
            if inner.exists() and not inner.is_symlink():
                args += ["--ro-bind", str(inner), str(inner)]
    for path in inside:
        args += ["--tmpfs", str(path)]
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
        reason: str | None = "bubblewrap (bwrap) is not installed"
        hardening: tuple[str, ...] = ()
        if binary is not None:
            reason, hardening = await _probe(binary, env)
        if reason is None and binary is not None:
            return bwrap_args(
                binary, writable=self.writable, hidden=self.hidden, cwd=Path(cwd).resolve(),
                hardening=hardening,
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
        return self.mode != "none" and binary is not None and (await _probe(binary, env))[0] is None

    async def unavailable_reason(self, env: Mapping[str, str]) -> str | None:
        """Why commands would run without a sandbox (None: they would run in one)."""
        if self.mode == "none":
            return 'tools.exec.sandbox is "none"'
        binary = self.bwrap or _find_bwrap(env)
        if binary is None:
            return "bubblewrap (bwrap) is not installed"
        return (await _probe(binary, env))[0]


def _find_bwrap(env: Mapping[str, str]) -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    path = env.get("PATH") or os.defpath
    return shutil.which("bwrap", path=path) or shutil.which("bwrap", path="/usr/bin:/bin")


async def _probe(binary: str, env: Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
    """(None, the hardening options that work) when ``bwrap`` can start a sandbox without
    capabilities here, else (one line saying why not, ())."""
    if binary in _probed:
        return _probed[binary]
    reason: str | None = None
    for hardening in HARDENING:
        reason = await _try(binary, env, hardening)
        if reason is None:
            _probed[binary] = (None, hardening)
            return _probed[binary]
    _probed[binary] = (reason, ())
    return _probed[binary]


async def _try(binary: str, env: Mapping[str, str], hardening: tuple[str, ...]) -> str | None:
    here = Path.cwd()
    shell = shutil.which("sh", path=env.get("PATH") or os.defpath) or "/bin/sh"
    argv = [*bwrap_args(binary, writable=(), hidden=(), cwd=Path("/"), hardening=hardening),
            shell, "-c", _REPORT_CAPS]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=here if here.is_dir() else "/",
        )
        out, err = await asyncio.wait_for(proc.communicate(), _PROBE_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        return f"bubblewrap could not start ({exc})"
    if proc.returncode != 0:
        detail = err.decode("utf-8", "replace").strip().splitlines()
        return f"bubblewrap cannot create a sandbox here ({detail[-1] if detail else proc.returncode})"
    caps = out.decode("ascii", "replace").strip()
    if caps.strip("0"):
        return f"bubblewrap left the sandbox with capabilities (CapEff {caps})"
    return None


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
