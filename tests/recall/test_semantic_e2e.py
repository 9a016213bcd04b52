"""Semantic recall as a user meets it: config.json, a chat whose memory_search finds a fact
by meaning, and `hippobot memory search --explain` / `reindex` on the command line."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from hippobot.agent.agent import Agent
from hippobot.config import load_settings
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.testing import ScriptedModel
from hippobot.testing.cli import run_cli
from hippobot.testing.server import ScriptedServer

from .test_embeddings import concept_vector

EMBEDDINGS = {"provider": "vllm", "model": "concepts", "dimensions": 4}


def _configure(home: Path, server: ScriptedServer) -> None:
    config = {
        "recall": {"embeddings": EMBEDDINGS},
        "providers": {"vllm": {"apiBase": server.base_url}},
    }
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")


def _vectors(workspace: Path) -> int:
    with sqlite3.connect(workspace / ".hippobot" / "recall.sqlite3") as conn:
        return conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]


async def test_a_turn_embeds_in_the_background_and_memory_search_finds_by_meaning(
    hippobot_home: Path, scripted_server: ScriptedServer, scripted_model: ScriptedModel
) -> None:
    scripted_model.embedding = concept_vector
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    _configure(hippobot_home, scripted_server)
    env = {
        "HIPPOBOT_HOME": str(hippobot_home),
        "HIPPOBOT_MODEL": "scripted-model",
        "HIPPOBOT_API_BASE": scripted_server.base_url,
        "HIPPOBOT_API_KEY": "sk-test-key-000000000000",
    }
    settings = load_settings(env)
    MemoryStore(settings.workspace).append_history(
        "- [durable] Bought a new automobile in March", session_key="telegram:7",
        source=HistorySource("telegram:7", 0, 2),
    )  # fmt: skip
    agent = Agent(settings)
    scripted_model.reply("Noted.")
    await agent.turn("cli:direct", "hello there")
    await agent.aclose()  # drains the background embedding job
    assert _vectors(settings.workspace) >= 3  # the entry and both new messages

    # No shared word with "automobile": only the vector side can find it.
    scripted_model.reply_tool_call("memory_search", {"query": "my car"})
    scripted_model.reply("You bought an automobile in March.")
    agent = Agent(settings)
    await agent.turn("cli:direct", "what did I buy?")
    await agent.aclose()
    tool_result = next(
        m for m in scripted_model.requests[-1].messages if m.get("role") == "tool"
    )
    assert "automobile" in tool_result["content"]


def test_cli_search_explain_and_reindex(
    hippobot_home: Path, scripted_server: ScriptedServer, scripted_model: ScriptedModel
) -> None:
    scripted_model.embedding = concept_vector
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    _configure(hippobot_home, scripted_server)
    workspace = load_settings({"HIPPOBOT_HOME": str(hippobot_home)}).workspace
    store = MemoryStore(workspace)
    store.append_history("- [durable] The puppy needs a walk every morning", session_key="cli:direct",
                         source=HistorySource("cli:direct", 0, 2))  # fmt: skip
    store.append_history("- [ephemeral] Rain expected on Friday", session_key="cli:direct",
                         source=HistorySource("cli:direct", 2, 4))  # fmt: skip

    out = run_cli(["memory", "search", "dog", "--explain"], hippobot_home)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[:2]
    assert "puppy" in first[0]
    assert "bm25 -" in first[1] and "vector" in first[1] and "score" in first[1]

    hits = json.loads(run_cli(["memory", "search", "umbrella", "--json", "--explain"], hippobot_home).stdout)
    assert "Rain" in hits[0]["snippet"] and hits[0]["explain"]["vector_rank"] == 1

    again = run_cli(["memory", "reindex"], hippobot_home)
    assert again.returncode == 0 and "embedded:" in again.stdout, again.stderr


def test_cli_search_without_the_endpoint_warns_and_still_finds_words(
    hippobot_home: Path, scripted_server: ScriptedServer, scripted_model: ScriptedModel
) -> None:
    # The scripted model has no embeddings: its /v1/embeddings answers 404.
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    _configure(hippobot_home, scripted_server)
    workspace = load_settings({"HIPPOBOT_HOME": str(hippobot_home)}).workspace
    MemoryStore(workspace).append_history("- [durable] Owns a boat called Marlin", session_key="cli:direct",
                                          source=HistorySource("cli:direct", 0, 2))  # fmt: skip
    out = run_cli(["memory", "search", "Marlin"], hippobot_home)
    assert out.returncode == 0 and "Marlin" in out.stdout
    assert out.stderr.count("keywords only") == 1
