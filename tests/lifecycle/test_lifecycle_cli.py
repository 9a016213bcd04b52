"""The lifecycle from the command line: a small window, a detached Dream after a one-shot
run, and what waits for Dream and why."""

from __future__ import annotations

import json
import re
import time

from hippobot.config import load_settings
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.testing.archivist import archivist_and_dreamer
from hippobot.testing.cli import run_cli as run


def small_window_home(home, window: int = 4096, max_tokens: int = 512):
    assert run(["onboard"], home).returncode == 0
    config = home / "config.json"
    text = config.read_text()
    text = re.sub(r'"contextWindowTokens": \d+', f'"contextWindowTokens": {window}', text)
    text = re.sub(r'"maxTokens": (\d+|null)', f'"maxTokens": {max_tokens}', text)
    config.write_text(text)
    return load_settings({"HIPPOBOT_HOME": str(home)}).workspace


def test_context_shows_how_a_small_window_is_split(hippobot_home):
    small_window_home(hippobot_home)
    out = run(["context"], hippobot_home)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "How the 4,096-token window is split" in text
    for row in ("fixed prompt", "memory files", "Recent History", "conversation", "reply reserve", "safety margin"):
        assert row in text
    split = json.loads(run(["context", "--json"], hippobot_home).stdout)["budget"]
    assert split["reply_reserve"] == 512 and split["margin"] == 256
    assert split["fixed"] + split["conversation_room"] <= split["input"] + split["memory_files"] + split["recent_history"]


def test_a_window_too_small_is_one_line_naming_the_minimum(hippobot_home, scripted_server, scripted_model):
    small_window_home(hippobot_home, window=2048)
    out = run(["agent", "-m", "hello"], hippobot_home, scripted_server)
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert "config.json" in line and "contextWindowTokens is 2,048" in line
    assert re.search(r"at least \d,\d{3}", line)
    assert scripted_model.requests == []


def test_a_one_shot_run_leaves_dream_to_a_detached_job(hippobot_home, scripted_server, scripted_model):
    workspace = small_window_home(hippobot_home)
    store = MemoryStore(workspace)
    for n in range(30):  # more pending facts than Recent History's share of a 4k window
        store.append_history(f"- [permanent] User's locker code at gym Delta{n} is {1000 + 37 * n}",
                             session_key="telegram:me", source=HistorySource("telegram:me", 2 * n, 2 * n + 2))
    scripted_model.fallback = archivist_and_dreamer
    out = run(["agent", "-m", "hello"], hippobot_home, scripted_server)
    assert out.returncode == 0, out.stderr
    # the reply came first; Dream runs on in its own process
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and MemoryStore(workspace).dream_cursor() < 30:
        time.sleep(0.2)
    assert MemoryStore(workspace).dream_cursor() == 30
    user = (workspace / "USER.md").read_text()
    assert all(f"Delta{n} is {1000 + 37 * n}" in user for n in range(30))
    log = workspace / ".hippobot" / "dream" / "background.log"
    while time.monotonic() < deadline and "written to USER.md" not in log.read_text():
        time.sleep(0.2)  # the child writes its report just after the cursor moves
    assert "written to USER.md" in log.read_text()


def test_memory_history_pending_says_why(hippobot_home, scripted_server, scripted_model):
    workspace = small_window_home(hippobot_home, window=0)
    MemoryStore(workspace).append_history("- [permanent] User has a cat named Luna", session_key="cli:direct")
    scripted_model.reply("")
    scripted_model.reply("")
    dream = run(["dream"], hippobot_home, scripted_server)
    assert "stay pending" in dream.stdout
    out = run(["memory", "history", "--pending"], hippobot_home)
    assert "cat named Luna" in out.stdout
    assert "waiting: the model's analysis was empty" in out.stdout
    data = json.loads(run(["memory", "history", "--pending", "--json"], hippobot_home).stdout)
    assert data[0]["waiting"].startswith("the model's analysis was empty")
