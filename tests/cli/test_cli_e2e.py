"""The `hippobot` executable as a new user runs it, against the scripted model over HTTP."""

from __future__ import annotations

import json

import pytest

from hippobot.testing.cli import run_cli as run


def test_onboard_then_two_one_shot_turns_continue_the_conversation(hippobot_home, scripted_server, scripted_model):
    out = run(["onboard"], hippobot_home)
    assert out.returncode == 0, out.stderr
    assert (hippobot_home / "config.json").exists()
    assert (hippobot_home / "workspace" / "SOUL.md").exists()
    assert (hippobot_home / "workspace" / ".git").exists()

    scripted_model.reply("Hello Grace!").reply("Your name is Grace.")
    first = run(["agent", "-m", "I am Grace."], hippobot_home, scripted_server)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Hello Grace!\n"  # only the reply on stdout
    second = run(["agent", "-m", "Who am I?"], hippobot_home, scripted_server)
    assert second.stdout == "Your name is Grace.\n"
    assert "I am Grace." in json.dumps(scripted_model.requests[1].messages)
    session = hippobot_home / "workspace" / "sessions" / "cli" / "direct.jsonl"
    assert session.exists()


def test_onboard_is_idempotent_and_keeps_user_edits(hippobot_home):
    run(["onboard"], hippobot_home)
    soul = hippobot_home / "workspace" / "SOUL.md"
    soul.write_text("# Soul\nI speak like a pirate.\n")
    again = run(["onboard"], hippobot_home)
    assert again.returncode == 0
    assert soul.read_text() == "# Soul\nI speak like a pirate.\n"
    assert "kept" in again.stdout


def test_piped_stdin_is_one_message_per_line(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("first reply").reply("second reply")
    out = run(["agent", "-s", "cli:script"], hippobot_home, scripted_server, stdin="hi\nmore\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["first reply", "second reply"]
    assert (hippobot_home / "workspace" / "sessions" / "cli" / "script.jsonl").exists()


def test_no_model_configured_is_one_clear_line(hippobot_home):
    out = run(["agent", "-m", "hello"], hippobot_home)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "HIPPOBOT_MODEL" in lines[0]
    assert f"add a provider to {hippobot_home / 'config.json'} " in lines[0]  # the real file
    # Commands that only read files still work.
    assert run(["sessions", "list"], hippobot_home).returncode == 0
    assert run(["context"], hippobot_home).returncode == 0


def test_unreachable_endpoint_keeps_the_message(hippobot_home):
    out = run(
        ["agent", "-m", "keep this please"], hippobot_home,
        HIPPOBOT_MODEL="m", HIPPOBOT_API_BASE="http://127.0.0.1:9/v1", HIPPOBOT_API_KEY="sk-x",
    )
    assert out.returncode != 0
    assert "cannot reach" in out.stderr and out.stderr.count("\n") == 1
    session = hippobot_home / "workspace" / "sessions" / "cli" / "direct.jsonl"
    assert "keep this please" in session.read_text()


def test_wrong_api_key_is_reported_not_retried(hippobot_home, scripted_server, scripted_model):
    scripted_model.fail(401)
    out = run(["agent", "-m", "hello"], hippobot_home, scripted_server)
    assert out.returncode != 0
    assert "401" in out.stderr and "HIPPOBOT_API_KEY" in out.stderr
    assert len(scripted_model.requests) == 1


def test_malformed_config_names_file_and_line(hippobot_home):
    (hippobot_home / "config.json").write_text('{\n  "agents": {\n    "defaults": {"maxTokens": "lots"}\n  }\n}\n')
    out = run(["status"], hippobot_home)
    assert out.returncode != 0
    line = out.stderr.strip()
    assert "config.json:3" in line and "maxTokens" in line
    (hippobot_home / "config.json").write_text('{"agents": {,}}')
    out = run(["status"], hippobot_home)
    assert "config.json:1" in out.stderr and "invalid JSON" in out.stderr


def test_sessions_list_show_delete_with_json(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("noted")
    run(["agent", "-m", "remember the milk", "-s", "cli:shop"], hippobot_home, scripted_server)
    listed = json.loads(run(["sessions", "list", "--json"], hippobot_home).stdout)
    assert [s["key"] for s in listed] == ["cli:shop"]
    shown = json.loads(run(["sessions", "show", "cli:shop", "--json"], hippobot_home).stdout)
    assert shown["messages"][0]["text"] == "remember the milk"  # runtime context stripped
    text = run(["sessions", "show", "cli:shop"], hippobot_home).stdout
    assert "Runtime Context" not in text
    assert run(["sessions", "delete", "cli:shop", "--yes"], hippobot_home).returncode == 0
    assert json.loads(run(["sessions", "list", "--json"], hippobot_home).stdout) == []
    missing = run(["sessions", "show", "cli:nope"], hippobot_home)
    assert missing.returncode != 0 and "sessions list" in missing.stderr


def test_status_and_context_json(hippobot_home, scripted_server):
    run(["onboard"], hippobot_home)
    status = run(["status", "--json"], hippobot_home, scripted_server)
    data = json.loads(status.stdout)
    assert data["model"] == "scripted-model" and data["input_budget"] > 0
    ctx = json.loads(run(["context", "--json"], hippobot_home, scripted_server).stdout)
    names = [s["name"] for s in ctx["sections"]]
    assert names[0] == "identity" and "tool_contract" in names
    assert ctx["total_tokens"] < ctx["input_budget"]


@pytest.mark.parametrize("bad", [["agent", "-m", "x", "--image", "/nonexistent.png"]])
def test_missing_image_is_a_clear_error(hippobot_home, scripted_server, bad):
    out = run(bad, hippobot_home, scripted_server)
    assert out.returncode != 0
    assert "image not found" in out.stderr
