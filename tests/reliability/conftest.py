"""Fixtures of the reliability suite: the worker zygote, the workspace model and workspaces."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.memory.gitstore import GitStore
from hippobot.testing.cli import caller_env
from hippobot.testing.forkserver import ForkServer
from hippobot.testing.server import ScriptedServer

from .child_driver import API_KEY, MEMORY_SEED, write_config
from .harness import WorkspaceModel

DRIVER = Path(__file__).with_name("child_driver.py")


class Zygote:
    """Workers forked on request from a :class:`ForkServer` that ran one warm-up worker, so
    a worker starts in milliseconds (see child_driver.py)."""

    def __init__(self) -> None:
        self.forks = ForkServer(f"{DRIVER}:warm_up", env=caller_env())

    def spawn(self, **args: Any) -> int:
        return self.forks.spawn(f"{DRIVER}:worker", args, stderr=args.get("stderr"))

    def wait(self, pid: int) -> dict[str, Any]:
        status = self.forks.wait(pid)
        return {"pid": pid, "code": status.code, "signal": status.signal}

    def close(self) -> None:
        self.forks.close()


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
