"""Shared fixtures: real workspaces in tmp dirs and agents wired to the scripted model over HTTP."""

from __future__ import annotations

import compileall
import fnmatch
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import Settings, load_settings
from hippobot.testing.cli import share_fork_server
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
    """Compile hippobot's modules and the test modules once, before any worker starts.

    Several hundred tests run the real CLI in a child process. Where bytecode writing is
    switched off (PYTHONDONTWRITEBYTECODE, common in containers) every child would compile
    every module again, about a third of its start-up; and every pytest-xdist worker would
    rewrite the asserts of all test modules again (two thirds of its collection time). Only
    the controller does this; the workers start after it and read the cached files.
    """
    if hasattr(session.config, "workerinput"):
        return
    import hippobot

    compileall.compile_dir(Path(hippobot.__file__).parent, quiet=1)
    _cache_rewritten_test_modules(session.config)
    if getattr(session.config.option, "numprocesses", None):
        _share_one_fork_server(session.config)


def _share_one_fork_server(config: pytest.Config) -> None:
    """One warmed-up fork server for every worker's CLI runs (each would warm up its own,
    ~4 s of CPU); it warms up while the workers collect."""
    folder = tempfile.mkdtemp(prefix="hippobot-forks-")
    server = share_fork_server(os.path.join(folder, "socket"))  # the workers start after this

    def stop() -> None:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(30)
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(stop)


def _cache_rewritten_test_modules(config: pytest.Config) -> None:
    """Write pytest's cache of assert-rewritten modules (the tests and the pytest plugins),
    split over the CPUs.

    pytest reads this cache even where it may not write it. The cache is its own format
    (internal to pytest); if that changes, this does nothing and workers rewrite as before.
    """
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return
    needed = ("_rewrite_test", "_read_pyc", "_write_pyc", "get_cache_dir", "PYC_TAIL", "assertstate_key")
    if config.getoption("assertmode") != "rewrite" or not all(hasattr(rewrite, n) for n in needed):
        return
    state = config.stash.get(rewrite.assertstate_key, None)
    if state is None:
        return
    patterns = [*config.getini("python_files"), "conftest.py"]
    sources = [path for path in sorted(Path(__file__).parent.rglob("*.py"))
               if any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)]
    # pytest also rewrites the plugins it loads (hypothesis, xdist, anyio, …), in every worker.
    plugins = getattr(state.hook, "_rewritten_names", {})
    sources += [Path(path) for path in plugins.values() if str(path).endswith(".py")]
    todo: list[tuple[Path, Path]] = []
    for source in dict.fromkeys(sources):
        cache_dir = rewrite.get_cache_dir(source)
        cached = cache_dir / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, cached) is None:
            todo.append((source, cached))
    if not todo:
        return

    def rewrite_all(batch: list[tuple[Path, Path]]) -> None:
        for source, cached in batch:
            try:
                cached.parent.mkdir(exist_ok=True)
                stat, code = rewrite._rewrite_test(source, config)
            except (OSError, SyntaxError):
                continue  # the worker reports it when it collects the module
            rewrite._write_pyc(state, code, stat, cached)

    # Forking is safe here: xdist starts its threads and workers after this hook.
    shares = min(os.cpu_count() or 1, len(todo)) if threading.active_count() == 1 else 1
    children = []
    for share in range(1, shares):
        pid = os.fork()
        if pid == 0:
            try:
                rewrite_all(todo[share::shares])
            finally:
                os._exit(0)
        children.append(pid)
    rewrite_all(todo[0::shares])
    for pid in children:
        os.waitpid(pid, 0)


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
