"""Run the ``hippobot`` command as a user would, in a child process, for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hippobot.testing.server import ScriptedServer

__all__ = ["run_cli"]


def run_cli(
    args: list[str],
    home: Path,
    server: ScriptedServer | None = None,
    stdin: str | None = None,
    **env_extra: str,
) -> subprocess.CompletedProcess[str]:
    """``python -m hippobot ARGS`` with ``HIPPOBOT_HOME=home`` and none of the caller's
    provider variables; with ``server``, pointed at that scripted model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
    env["HIPPOBOT_HOME"] = str(home)
    if server is not None:
        env.update(
            HIPPOBOT_MODEL="scripted-model",
            HIPPOBOT_API_BASE=server.base_url,
            HIPPOBOT_API_KEY="sk-test-key-000000000000",
        )
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "hippobot", *args],
        input=stdin, capture_output=True, text=True, env=env, timeout=120,
    )
