"""Run the ``hippobot`` command as a user would, in a child process, for end-to-end tests.

By default the child is forked from a :class:`~hippobot.testing.forkserver.ForkServer` that
has already imported hippobot: a separate process with the given environment, streams and
exit status, minus the second of interpreter start-up and imports. ``fresh=True`` (or
``HIPPOBOT_TEST_FRESH_CLI=1`` for a whole run) starts a new interpreter instead.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from hippobot.testing.forkserver import ForkServer, start_shared

if TYPE_CHECKING:
    from hippobot.testing.server import ScriptedServer

__all__ = ["FRESH_CLI", "PRELOAD", "PROVIDER_PREFIXES", "SHARED_FORK_SERVER", "TEST_RUN_PREFIX", "caller_env", "run_cli", "share_fork_server"]

PROVIDER_PREFIXES = ("HIPPOBOT_", "OPENAI_", "ANTHROPIC_")
# Settings of a test run (hippobot never reads them): kept in a test's environment, though
# never passed on to the hippobot processes it starts.
TEST_RUN_PREFIX = "HIPPOBOT_TEST_"
FRESH_CLI = "HIPPOBOT_TEST_FRESH_CLI"
PRELOAD = "hippobot.testing.forkserver:preload_cli"
# Where a fork server started with ``start_shared(path, PRELOAD)`` listens: test processes
# that find this variable join it instead of warming up a server each (pytest-xdist workers).
SHARED_FORK_SERVER = "HIPPOBOT_TEST_FORK_SERVER"
_server: ForkServer | None = None
_server_lock = threading.Lock()


def caller_env() -> dict[str, str]:
    """This process's environment without hippobot's or any provider's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(PROVIDER_PREFIXES)}


def share_fork_server(path: str) -> subprocess.Popen[bytes]:
    """Start the fork server that the processes this one starts next (pytest-xdist workers)
    join instead of warming up one each; it listens at ``path``, and closing the returned
    process's stdin stops it."""
    server = start_shared(path, PRELOAD, env=caller_env())
    os.environ[SHARED_FORK_SERVER] = path
    return server


def _fork_server() -> ForkServer:
    global _server
    with _server_lock:
        if _server is None or not _server.alive:
            shared = os.environ.get(SHARED_FORK_SERVER)
            if shared:
                _server = ForkServer.connect(shared)
            else:
                _server = ForkServer(PRELOAD, env=caller_env())
            atexit.register(_server.close)
        return _server


def run_cli(
    args: list[str],
    home: Path,
    server: ScriptedServer | None = None,
    stdin: str | None = None,
    *,
    timeout: float = 120,
    fresh: bool = False,
    **env_extra: str,
) -> subprocess.CompletedProcess[str]:
    """``python -m hippobot ARGS`` with ``HIPPOBOT_HOME=home`` and none of the caller's
    provider variables; with ``server``, pointed at that scripted model. Standard input is
    ``stdin`` or empty; past ``timeout`` seconds the child is killed and
    :class:`subprocess.TimeoutExpired` raised, as :func:`subprocess.run` does."""
    env = caller_env()
    env["HIPPOBOT_HOME"] = str(home)
    if server is not None:
        env.update(
            HIPPOBOT_MODEL="scripted-model",
            HIPPOBOT_API_BASE=server.base_url,
            HIPPOBOT_API_KEY="sk-test-key-000000000000",
        )
    env.update(env_extra)
    argv = [sys.executable, "-m", "hippobot", *args]
    if fresh or os.environ.get(FRESH_CLI) == "1":
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env,
                              timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL)
    streams = Path(tempfile.mkdtemp(prefix="hippobot-cli-"))
    try:
        stdin_path = None
        if stdin is not None:
            stdin_path = streams / "stdin"
            stdin_path.write_text(stdin, encoding="utf-8")
        out, err = streams / "stdout", streams / "stderr"
        forks = _fork_server()
        pid = forks.spawn("hippobot.testing.forkserver:cli_main", {"argv": args}, env=env,
                          cwd=os.getcwd(), stdin=str(stdin_path) if stdin_path else None,
                          stdout=str(out), stderr=str(err))
        try:
            status = forks.wait(pid, timeout)
        except TimeoutError:
            forks.kill(pid)
            forks.wait(pid)
            raise subprocess.TimeoutExpired(argv, timeout, _read(out), _read(err)) from None
        return subprocess.CompletedProcess(argv, status.returncode, _read(out), _read(err))
    finally:
        shutil.rmtree(streams, ignore_errors=True)


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
