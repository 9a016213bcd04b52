"""Undo that sticks and versions that tell the truth, driven through the `hippobot` command
line against the scripted model over HTTP, as a user (or a cron script) would."""

from __future__ import annotations

import json
from pathlib import Path

from hippobot.memory.gitstore import GitStore
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.testing.archivist import archivist
from hippobot.testing.cli import run_cli as run

BOAT = "- Owns a boat called Marlin"


def converse(home: Path, server, text: str) -> None:
    """One conversation that ends with /new, so its facts are archived to history."""
    said = run(["agent", "-m", text], home, server)
    assert said.returncode == 0, said.stderr
    new = run(["agent", "-m", "/NEW"], home, server)  # slash commands ignore case
    assert new.returncode == 0 and "New session started" in new.stdout, new.stdout + new.stderr


def script_dream(model, findings: str, edits: list[tuple[str, str, str]]) -> None:
    model.reply(findings)
    for path, old, new in edits:
        model.reply_tool_call("edit_file", {"path": path, "old_text": old, "new_text": new})
    model.reply("done")


def versions(home: Path) -> list[dict]:
    out = run(["memory", "restore", "--json"], home)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_undone_dream_line_stays_out_until_a_later_conversation_restates_it(
    hippobot_home, scripted_server, scripted_model
):
    scripted_model.fallback = archivist  # chat replies and /new archiving, like a real model
    workspace = hippobot_home / "workspace"
    converse(hippobot_home, scripted_server, "FACT: my boat is called Marlin")  # no onboard
    store = MemoryStore(workspace)
    assert "boat is called Marlin" in store.read_history()[0].content

    script_dream(scripted_model, "[USER] Owns a boat called Marlin", [("USER.md", "- Name:", f"- Name:\n{BOAT}")])
    dreamt = run(["dream"], hippobot_home, scripted_server)
    assert dreamt.returncode == 0, dreamt.stderr
    assert "hippobot memory restore" in dreamt.stdout and "/dream-restore" not in dreamt.stdout
    assert BOAT in (workspace / "USER.md").read_text()
    cursor = store.dream_cursor()

    latest = json.loads(run(["memory", "log", "--json"], hippobot_home).stdout)
    assert latest["subject"].startswith("dream: ") and f"+{BOAT}" in latest["diff"]
    undone = run(["memory", "restore", latest["short_sha"], "--json"], hippobot_home)
    assert undone.returncode == 0, undone.stderr
    result = json.loads(undone.stdout)
    assert result["files"] == ["USER.md"]
    assert result["forgotten"] == [{"file": "USER.md", "text": BOAT}]
    assert BOAT not in (workspace / "USER.md").read_text()
    assert store.dream_cursor() == cursor  # not rewound: Dream does not read it all again

    # An unrelated conversation; Dream (stubbornly) tries to bring the boat back as well.
    converse(hippobot_home, scripted_server, "FACT: I drink green tea")
    script_dream(
        scripted_model,
        "[USER] Owns a boat called Marlin\n[USER] Drinks green tea",
        [("USER.md", "- Name:", f"- Name:\n{BOAT}\n- Drinks green tea")],
    )
    again = run(["dream", "--json"], hippobot_home, scripted_server)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["status"] == "done" and report["withheld"] == [f"USER.md: {BOAT}"]
    analysis = next(r for r in reversed(scripted_model.requests) if "## Task: analysis" in r.last_user_text())
    assert "Lines the user undid" in analysis.last_user_text() and BOAT in analysis.last_user_text()
    user = (workspace / "USER.md").read_text()
    assert "- Drinks green tea" in user and "Marlin" not in user

    # The user says it again in a later conversation: now it may come back.
    converse(hippobot_home, scripted_server, "FACT: my boat is still called Marlin")
    script_dream(scripted_model, "[USER] Owns a boat called Marlin", [("USER.md", "- Name:", f"- Name:\n{BOAT}")])
    third = json.loads(run(["dream", "--json"], hippobot_home, scripted_server).stdout)
    assert third["withheld"] == [] and third["files"] == ["USER.md"]
    assert BOAT in (workspace / "USER.md").read_text()


def test_env_only_setup_has_versions_after_the_first_dream(hippobot_home, scripted_server, scripted_model):
    workspace = hippobot_home / "workspace"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "USER.md").write_text("# User\n- Name:\n")
    MemoryStore(workspace).append_history("- [permanent] User is vegetarian", session_key="cli:direct")
    assert not (workspace / ".git").exists()
    empty = run(["memory", "log"], hippobot_home)
    assert empty.returncode == 0 and "No memory versions yet" in empty.stdout
    assert "not started yet" in json.loads(run(["status", "--json"], hippobot_home).stdout)["versioning"]

    script_dream(scripted_model, "[USER] Is vegetarian", [("USER.md", "- Name:", "- Name:\n- Vegetarian")])
    out = run(["dream"], hippobot_home, scripted_server)
    assert out.returncode == 0, out.stderr
    subjects = [v["subject"] for v in versions(hippobot_home)]
    assert subjects[0].startswith("dream: ") and subjects[-1] == "init: memory store"


def test_chat_commits_only_what_a_successful_edit_changed(hippobot_home, scripted_server, scripted_model):
    assert run(["onboard"], hippobot_home).returncode == 0
    workspace = hippobot_home / "workspace"
    soul = workspace / "SOUL.md"
    soul.write_text(soul.read_text() + "\nMy own line, typed by hand.\n")
    before = versions(hippobot_home)

    scripted_model.reply_tool_call("edit_file", {"path": "memory/MEMORY.md", "old_text": "not in the file", "new_text": "x"})
    scripted_model.reply("Sorry, I could not find that.")
    failed = run(["agent", "-m", "Remember that I like jazz."], hippobot_home, scripted_server)
    assert failed.returncode == 0, failed.stderr
    assert versions(hippobot_home) == before  # a failed edit commits nothing

    scripted_model.reply_tool_call(
        "edit_file",
        {"path": "memory/MEMORY.md", "old_text": "### Preferences\n", "new_text": "### Preferences\n- Likes jazz\n"},
    )
    scripted_model.reply("Noted: you like jazz.")
    assert run(["agent", "-m", "Remember that I like jazz."], hippobot_home, scripted_server).returncode == 0
    chat, manual = versions(hippobot_home)[:2]
    assert chat["subject"] == "memory: edited in chat (cli:direct)" and chat["files"] == ["memory/MEMORY.md"]
    assert manual["subject"] == "manual: edits before chat" and manual["files"] == ["SOUL.md"]

    undo = run(["memory", "restore", chat["short_sha"]], hippobot_home)
    assert undo.returncode == 0, undo.stderr
    assert "- Likes jazz" not in (workspace / "memory" / "MEMORY.md").read_text()
    assert "My own line, typed by hand." in soul.read_text()  # the user's line survives


def test_a_hand_edit_survives_undoing_a_dream_commit(hippobot_home, scripted_server, scripted_model):
    run(["onboard"], hippobot_home)
    workspace = hippobot_home / "workspace"
    MemoryStore(workspace).append_history("- [permanent] User is a pilot", session_key="cli:direct")
    user = workspace / "USER.md"
    user.write_text(user.read_text() + "\n- Typed by hand: likes kites\n")
    script_dream(scripted_model, "[USER] Is a pilot", [("USER.md", "- Name:", "- Name:\n- Pilot")])
    assert run(["dream"], hippobot_home, scripted_server).returncode == 0
    dream = next(v for v in versions(hippobot_home) if v["subject"].startswith("dream:"))
    assert run(["memory", "restore", dream["short_sha"]], hippobot_home).returncode == 0
    text = user.read_text()
    assert "- Pilot" not in text and "- Typed by hand: likes kites" in text


def one_error_line(out) -> str:
    assert out.returncode != 0, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_every_failure_exits_non_zero_with_one_line(hippobot_home, scripted_server, scripted_model):
    run(["onboard"], hippobot_home)
    workspace = hippobot_home / "workspace"
    store = MemoryStore(workspace)
    store.append_history("- [permanent] User lives in Osaka", session_key="cli:direct",
                         source=HistorySource("cli:direct", 0, 2))

    down = run(["dream"], hippobot_home, HIPPOBOT_MODEL="m", HIPPOBOT_API_BASE="http://127.0.0.1:9/v1",
               HIPPOBOT_API_KEY="sk-x")
    assert "Dream failed" in one_error_line(down)
    assert store.pending_count() == 1

    assert "matches no memory version" in one_error_line(run(["memory", "log", "ffffffff"], hippobot_home))
    assert "matches no memory version" in one_error_line(run(["memory", "restore", "ffffffff"], hippobot_home))

    script_dream(scripted_model, "[USER] Lives in Osaka", [("USER.md", "- Name:", "- Name:\n- Lives in Osaka")])
    assert run(["dream"], hippobot_home, scripted_server).returncode == 0
    user = workspace / "USER.md"
    user.write_text(user.read_text().replace("- Lives in Osaka", "- Lives in Osaka, Kita ward"))
    sha = GitStore(workspace).log(limit=1, prefix="dream:")[0].short_sha
    clash = one_error_line(run(["memory", "restore", sha], hippobot_home))
    assert "cannot undo" in clash and "USER.md" in clash
    assert "Kita ward" in user.read_text()  # nothing was changed


def test_onboard_w_records_the_workspace_for_later_commands(hippobot_home, tmp_path):
    elsewhere = tmp_path / "my-memory"
    out = run(["onboard", "-w", str(elsewhere), "--json"], hippobot_home)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["workspace"] == str(elsewhere.resolve())
    config = (hippobot_home / "config.json").read_text()
    assert config.startswith("// hippobot configuration")  # its comments are kept
    status = json.loads(run(["status", "--json"], hippobot_home).stdout)
    assert status["workspace"] == str(elsewhere.resolve())
    assert status["versioning"].startswith("on")
