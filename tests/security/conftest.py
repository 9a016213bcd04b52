"""Agents for the security suite: a real workspace, the scripted model over HTTP, a known key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.providers.retry import RetryPolicy
from hippobot.session.keys import key_to_relpath
from hippobot.testing.server import ScriptedServer

KEY = "cli:attack"
API_KEY = "sk-attack-Zq81b7c0ffee4d2a9e6f13579bdf02468ace"


def security_env(home: Path, server: ScriptedServer) -> dict[str, str]:
    return {
        "HIPPOBOT_HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HIPPOBOT_MODEL": "scripted-model",
        "HIPPOBOT_API_BASE": server.base_url,
        "HIPPOBOT_API_KEY": API_KEY,
    }


@pytest.fixture
def make_agent(tmp_path: Path, scripted_server: ScriptedServer) -> Callable[..., Agent]:
    """``make_agent(**tools_config)``: an onboarded Agent whose config.json holds the key."""

    def make(**tools: Any) -> Agent:
        home = tmp_path / "home"
        home.mkdir(parents=True, exist_ok=True)
        config = {"providers": {"custom": {"apiKey": API_KEY}}, "tools": tools}
        (home / "config.json").write_text(json.dumps(config))
        settings = load_settings(security_env(home, scripted_server))
        onboard(settings)
        agent = Agent(settings)
        agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
        return agent

    return make


def tool_results(agent: Agent, key: str = KEY) -> list[str]:
    """The tool results stored in the session, in order."""
    path = agent.workspace / key_to_relpath(key)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r["content"] for r in records if r.get("role") == "tool"]


def every_file_bytes(root: Path) -> bytes:
    """All regular files below ``root`` (git objects inflated), for "the key is nowhere" checks."""
    import zlib

    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if "/.git/objects/" in path.as_posix():
                try:
                    data = zlib.decompress(data)
                except zlib.error:
                    pass
            out.append(data)
    return b"\n".join(out)
