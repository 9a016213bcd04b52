"""`hippobot memory …` and `hippobot dream` as a user runs them after some conversations."""

from __future__ import annotations

import json
from datetime import datetime

from hippobot.config import load_settings
from hippobot.lifecycle.schedule import next_dream_delay
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.testing.cli import run_cli as run


def test_history_search_dream_log_and_restore_from_the_command_line(hippobot_home, scripted_server, scripted_model):
    assert run(["onboard"], hippobot_home).returncode == 0
    workspace = load_settings({"HIPPOBOT_HOME": str(hippobot_home)}).workspace
    store = MemoryStore(workspace)
    store.append_history("- [permanent] User's boat is called Marlin", session_key="cli:direct",
                         source=HistorySource("cli:direct", 0, 4))

    history = json.loads(run(["memory", "history", "--pending", "--json"], hippobot_home).stdout)
    assert history[0]["content"] == "- [permanent] User's boat is called Marlin"
    assert history[0]["source"] == {"session": "cli:direct", "from": 0, "to": 4}
    assert history[0]["pending"] is True
    assert "cli:direct#0-3" in run(["memory", "history"], hippobot_home).stdout

    hits = json.loads(run(["memory", "search", "Marlin", "--json"], hippobot_home).stdout)
    assert hits and hits[0]["citation"].startswith("history#")

    scripted_model.reply("[USER] Owns a boat called Marlin")  # dry run: phase 1 only
    dry = run(["dream", "--dry-run"], hippobot_home, scripted_server)
    assert "[USER] Owns a boat called Marlin" in dry.stdout and "nothing was edited" in dry.stdout

    scripted_model.reply("[USER] Owns a boat called Marlin")
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "- Name:", "new_text": "- Name:\n- Owns a boat called Marlin"})
    scripted_model.reply("done")
    out = run(["dream"], hippobot_home, scripted_server)
    assert "updated USER.md" in out.stdout, out.stdout + out.stderr
    assert "Owns a boat called Marlin" in run(["memory", "show"], hippobot_home).stdout

    log = run(["memory", "log"], hippobot_home).stdout
    assert "+- Owns a boat called Marlin" in log
    versions = run(["memory", "restore"], hippobot_home).stdout
    dream_line = next(line for line in versions.splitlines() if "dream:" in line)
    sha = dream_line.split()[0]
    restored = run(["memory", "restore", sha], hippobot_home)
    assert "Undid" in restored.stdout
    assert "Marlin" not in (workspace / "USER.md").read_text()
    bad = run(["memory", "restore", "ffffffff"], hippobot_home)
    assert bad.returncode == 1 and "matches no memory version" in bad.stderr


def test_dream_with_nothing_pending_explains_how_history_is_made(hippobot_home, scripted_server):
    run(["onboard"], hippobot_home)
    out = run(["dream"], hippobot_home, scripted_server)
    assert out.returncode == 0 and "Nothing to dream about" in out.stdout


def test_schedule_delays():
    now = datetime(2026, 11, 29, 14, 30).astimezone()
    assert next_dream_delay(2, None, now) == 7200
    assert next_dream_delay(2, "0 15 * * *", now) == 1800
