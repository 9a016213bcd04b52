"""hippobot pointed at a nanobot 0.2.x workspace as it is: reading never writes there."""

from __future__ import annotations

import json

from hippobot.testing.cli import run_cli

from .conftest import snapshot_tree


def test_read_only_commands_leave_a_nanobot_workspace_byte_identical(nanobot_home, hippobot_home):
    source = nanobot_home("0.2.2")
    workspace = source / "workspace"
    before = snapshot_tree(source)
    for args in (
        ["sessions", "list"],
        ["sessions", "list", "--all"],
        ["sessions", "show", "cli:direct"],
        ["sessions", "show", "telegram:4242", "--json"],
        ["memory", "log"],
    ):
        out = run_cli(args, hippobot_home, HIPPOBOT_WORKSPACE=str(workspace))
        assert out.returncode == 0, (args, out.stderr)
    after = snapshot_tree(source)
    assert {k: v for k, v in after.items() if k in before} == before  # nanobot's files untouched
    assert not [k for k in after if k.startswith("workspace/sessions/") and k not in before]
    assert not list((workspace / "sessions").glob("*.migrated*"))


def test_nanobots_dream_sessions_are_hidden_from_the_list_unless_asked(nanobot_home, hippobot_home):
    workspace = nanobot_home("0.2.2") / "workspace"
    listed = run_cli(["sessions", "list"], hippobot_home, HIPPOBOT_WORKSPACE=str(workspace))
    keys = [line.split()[0] for line in listed.stdout.splitlines() if not line.startswith("(")]
    assert sorted(keys) == ["cli:direct", "telegram:4242"]
    assert "(1 internal nanobot Dream session(s) hidden; --all shows them)" in listed.stdout
    everything = run_cli(["sessions", "list", "--all", "--json"], hippobot_home, HIPPOBOT_WORKSPACE=str(workspace))
    assert any(i["key"].startswith("dream:") for i in json.loads(everything.stdout))


def test_a_turn_in_place_writes_hippobots_copy_and_never_nanobots(
    nanobot_home, hippobot_home, scripted_server, scripted_model
):
    workspace = nanobot_home("0.2.2") / "workspace"
    legacy = workspace / "sessions" / "telegram_4242.jsonl"
    original = legacy.read_bytes()
    scripted_model.reply("Hi again.")
    out = run_cli(["agent", "-s", "telegram:4242", "-m", "Back on the phone."], hippobot_home,
                  scripted_server, HIPPOBOT_WORKSPACE=str(workspace))
    assert out.returncode == 0, out.stderr
    assert "Hello from my phone." in json.dumps(scripted_model.requests[0].messages)
    assert legacy.read_bytes() == original
    assert (workspace / "sessions" / "telegram" / "4242.jsonl").exists()
    # nanobot writes to its own file later: hippobot says so rather than shadowing it silently.
    with legacy.open("a") as handle:
        handle.write(json.dumps({"role": "user", "content": "from nanobot"}) + "\n")
    shown = run_cli(["sessions", "show", "telegram:4242"], hippobot_home, HIPPOBOT_WORKSPACE=str(workspace))
    assert shown.returncode == 0
    assert "changed after hippobot took the session over" in shown.stderr
    assert "Back on the phone." in shown.stdout and "from nanobot" not in shown.stdout
