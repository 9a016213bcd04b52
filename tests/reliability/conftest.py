"""Fixtures of the reliability suite: the worker zygote, the workspace model and workspaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.memory.gitstore import GitStore
from hippobot.testing.server import ScriptedServer

from .child_driver import API_KEY, MEMORY_SEED, write_config
from .harness import WorkspaceModel

DRIVER = Path(__file__).with_name("child_driver.py")


class Zygote:
    """A process that forks workers on request (see child_driver.py)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), "zygote"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        assert self._read() == {"ready": True}

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited (code {self.proc.wait()})")
        return json.loads(line)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def spawn(self, **args: Any) -> int:
        return int(self._ask({"cmd": "spawn", "args": args})["pid"])

    def wait(self, pid: int) -> dict[str, Any]:
        return self._ask({"cmd": "wait", "pid": pid})

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


@pytest.fixture
def workspace_model() -> Iterator[tuple[WorkspaceModel, ScriptedServer]]:
    model = WorkspaceModel()
    with ScriptedServer(model) as server:
        # Killed workers hang up mid-request by design; keep their connection resets quiet.
        server._server.handle_error = lambda request, address: None  # type: ignore[union-attr]
        yield model, server


def model_env(home: Path, base_url: str | None = None) -> dict[str, str]:
    env = {"HIPPOBOT_HOME": str(home), "PATH": "/usr/bin:/bin"}
    if base_url:
        env.update(HIPPOBOT_MODEL="scripted-model", HIPPOBOT_API_BASE=base_url,
                   HIPPOBOT_API_KEY=API_KEY)
    return env


@pytest.fixture
def make_home(tmp_path: Path) -> Callable[..., Path]:
    """``make_home(name, **defaults)``: an onboarded home whose MEMORY.md holds the fact list
    the workspace model edits, committed as the first memory version."""

    def make(name: str, **defaults: Any) -> Path:
        home = tmp_path / name
        write_config(home, **defaults)
        settings = load_settings(model_env(home))
        onboard(settings)
        (settings.workspace / "memory" / "MEMORY.md").write_text(MEMORY_SEED, encoding="utf-8")
        GitStore(settings.workspace).commit("seed: the fact list the tests append to")
        return home

    return make
