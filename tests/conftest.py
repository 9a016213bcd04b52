"""Shared fixtures: real workspaces in tmp dirs and agents wired to the scripted model over HTTP."""

from __future__ import annotations

import compileall
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import Settings, load_settings
from hippobot.testing.server import ScriptedServer

# Property tests explore the same inputs on every run, so CI is reproducible; set
# HYPOTHESIS_PROFILE=explore to search fresh random inputs locally.
# A loaded machine must not fail a property test for being slow: no deadline, no speed check.
# A derandomized run finds the same examples every time, so saving them is only overhead.
hypothesis_settings.register_profile(
    "ci", derandomize=True, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile hippobot's modules once, before any test starts a ``hippobot`` process.

    Several hundred tests run the real CLI in a child process. Where bytecode writing is
    switched off (PYTHONDONTWRITEBYTECODE, common in containers) every child would compile
    every module again, about a third of its start-up. Under pytest-xdist only the
    controller compiles; the workers start after it.
    """
    if hasattr(session.config, "workerinput"):
        return
    import hippobot

    compileall.compile_dir(Path(hippobot.__file__).parent, quiet=1)


def model_env(home: Path, server: ScriptedServer | None = None, **extra: str) -> dict[str, str]:
    """Environment that points hippobot at the scripted server (OpenAI-compatible API)."""
    env = {"HIPPOBOT_HOME": str(home), "PATH": "/usr/bin:/bin"}
    if server is not None:
        env.update(
            HIPPOBOT_MODEL="scripted-model",
            HIPPOBOT_API_BASE=server.base_url,
            HIPPOBOT_API_KEY="sk-test-key-000000000000",
        )
    env.update(extra)
    return env


@pytest.fixture
def make_settings(hippobot_home: Path, scripted_server: ScriptedServer) -> Callable[..., Settings]:
    def make(*, onboarded: bool = True, **defaults: Any) -> Settings:
        settings = load_settings(model_env(hippobot_home, scripted_server)).with_defaults(**defaults)
        if onboarded:
            onboard(settings)
        return settings

    return make


@pytest.fixture
def make_agent(make_settings: Callable[..., Settings]) -> Callable[..., Agent]:
    """An Agent on a fresh onboarded workspace that talks HTTP to the scripted model."""

    def make(**defaults: Any) -> Agent:
        settings = make_settings(**defaults)
        agent = Agent(settings)
        # Retries back off for real; keep tests quick by not sleeping between attempts.
        from hippobot.providers.retry import RetryPolicy

        agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
        return agent

    return make
