"""``agent -m`` prints its reply before the work that follows a turn, and a kill right after
the reply loses nothing: the session is complete on disk and the next run does what was left."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

from hippobot.agent.agent import Agent
from hippobot.config import load_settings
from hippobot.memory.gitstore import GitStore
from hippobot.memory.store import MemoryStore
from hippobot.testing.archivist import archivist, is_archive_request
from hippobot.testing.cli import caller_env
from hippobot.testing.cli import run_cli as run
from hippobot.workspace import Workspace

REPLY = "Noted: you like green tea."


def small_window_home(home, window: int = 4096):
    assert run(["onboard"], home).returncode == 0
    config = home / "config.json"
    text = re.sub(r'"contextWindowTokens": \d+', f'"contextWindowTokens": {window}', config.read_text())
    config.write_text(re.sub(r'"maxTokens": (\d+|null)', '"maxTokens": 512', text))
    return load_settings({"HIPPOBOT_HOME": str(home)}).workspace


def session_messages(workspace) -> list[dict]:
    lines = (workspace / "sessions" / "cli" / "direct.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("role")]


def spawn(home, server, message: str) -> subprocess.Popen[bytes]:
    env = caller_env()
    env.update(HIPPOBOT_HOME=str(home), HIPPOBOT_MODEL="scripted-model",
               HIPPOBOT_API_BASE=server.base_url, HIPPOBOT_API_KEY="sk-test-key-000000000000")
    return subprocess.Popen([sys.executable, "-m", "hippobot", "agent", "-m", message], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_until(proc: subprocess.Popen[bytes], wanted: bytes, timeout: float) -> bytes:
    assert proc.stdout is not None
    out, deadline = b"", time.monotonic() + timeout
    while wanted not in out:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            break
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        out += chunk
    return out


def test_the_reply_is_on_stdout_before_housekeeping_and_a_kill_then_loses_nothing(
    hippobot_home, scripted_server, scripted_model
):
    workspace = small_window_home(hippobot_home)
    # The turn edits MEMORY.md (a version commit follows) and ends near the window, so a
    # consolidation is due after it: the model answers that one only once the gate opens.
    gate = threading.Event()

    def archive_after_the_gate(request):
        assert is_archive_request(request), "only the archive request is unscripted"
        gate.wait(60)
        return archivist(request)

    scripted_model.fallback = archive_after_the_gate
    memory_text = (workspace / "memory" / "MEMORY.md").read_text() + "- User likes green tea\n"  # keeps every line
    scripted_model.reply_tool_call("write_file", {"path": "memory/MEMORY.md", "content": memory_text})
    scripted_model.reply(REPLY).usage(prompt_tokens=3500)

    proc = spawn(hippobot_home, scripted_server, "FACT: I like green tea.")
    try:
        out = read_until(proc, REPLY.encode(), timeout=30)
        assert REPLY.encode() in out, "the reply waited for the consolidation after the turn"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        gate.set()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    # Everything the turn produced is on disk.
    messages = session_messages(workspace)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert "FACT: I like green tea." in messages[0]["content"] and messages[-1]["content"] == REPLY
    assert (workspace / "memory" / "MEMORY.md").read_text() == memory_text
    assert MemoryStore(workspace).read_history() == []  # the consolidation never ran

    # The next run finishes what the killed one left: the archive and the version commit.
    scripted_model.reply("You're welcome.").usage(prompt_tokens=3600)
    again = run(["agent", "-m", "Thanks!"], hippobot_home, scripted_server)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "You're welcome.\n"
    archived = [e.content for e in MemoryStore(workspace).read_history()]
    assert any("I like green tea" in e for e in archived), "the due consolidation ran in the next run"
    subjects = [c.subject for c in GitStore(workspace).log(limit=10)]
    assert subjects.count("memory: edited in chat (cli:direct)") == 1
    assert not list(Workspace(workspace).pending_versions.glob("*.json"))


async def test_a_version_commit_left_pending_is_made_once_by_the_next_turn(
    make_settings, scripted_server, scripted_model
):
    settings = make_settings()
    agent = Agent(settings)
    user_text = (settings.workspace / "USER.md").read_text() + "\n- Name: Ada\n"  # keeps every line
    scripted_model.reply_tool_call("write_file", {"path": "USER.md", "content": user_text})
    scripted_model.reply("Hello Ada.")
    # As if the process died right after the reply: the commit of the edit is only noted.
    agent.versions.commit = lambda journal: None  # type: ignore[method-assign]
    await agent.turn("cli:direct", "I am Ada.")
    await agent.aclose()
    paths = Workspace(settings.workspace)
    assert len(list(paths.pending_versions.glob("*.json"))) == 1
    git = GitStore(settings.workspace)
    assert not any(c.subject.startswith("memory: edited in chat") for c in git.log(limit=10))

    # A later process: its first turn (no tools) picks the pending commit up after the reply.
    later = Agent(settings)
    scripted_model.reply("Hi again.")
    result = await later.turn("cli:direct", "hello")
    await later.aclose()
    assert result.reply == "Hi again."
    log = git.log(limit=10)
    chat = [c for c in log if c.subject == "memory: edited in chat (cli:direct)"]
    assert len(chat) == 1 and chat[0].files == ("USER.md",)
    assert not list(paths.pending_versions.glob("*.json"))
    # Committing the same journal again (a process killed after its commits but before it
    # removed the journal) adds nothing.
    journal = paths.pending_versions / "0-replayed.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text(json.dumps({"v": 1, "key": "cli:direct", "head": "0" * 40, "before": {"USER.md": None}}))
    later.versions.resume()
    assert len(git.log(limit=20)) == len(log) and not journal.exists()
