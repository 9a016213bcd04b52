"""``hippobot import nanobot``, run as a user would, over homes the real nanobot wrote."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from hippobot.testing.cli import caller_env, run_cli

from .conftest import FIXTURES, snapshot_tree

SECRET = "sk-fixture-not-a-real-key-0000"


def without_idle_compaction(home):
    """The import carries nanobot's ``idleCompactAfterMinutes: 15``, and the fixture's chats
    are older than that, so the next turn would archive them first; these tests look at the
    replayed messages themselves."""
    path = home / "config.json"
    data = json.loads(path.read_text())
    data["agents"]["defaults"]["idleCompactAfterMinutes"] = 0
    path.write_text(json.dumps(data))


def test_must_show_a_nanobot_0_3_5_home_carries_on_in_hippobot(
    nanobot_home, hippobot_home, scripted_server, scripted_model
):
    source = nanobot_home("0.3.5")
    before = snapshot_tree(source)

    out = run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert out.returncode == 0, out.stderr
    assert "brought  session cli:direct (4 messages)" in out.stdout
    assert "brought  session telegram:4242 (2 messages)" in out.stdout
    assert "brought  memory history (2 commits" in out.stdout
    assert "skipped  1 internal nanobot Dream session(s)" in out.stdout
    assert SECRET not in out.stdout + out.stderr  # secrets are carried, never printed

    listed = run_cli(["sessions", "list"], hippobot_home)
    assert listed.returncode == 0, listed.stderr
    keys = [line.split()[0] for line in listed.stdout.splitlines()]
    assert keys == ["cli:direct", "telegram:4242"]

    without_idle_compaction(hippobot_home)
    scripted_model.reply("Lavender honey, then.")
    chat = run_cli(["agent", "-s", "cli:direct", "-m", "Which honey did we talk about?"],
                   hippobot_home, scripted_server)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "Lavender honey, then.\n"
    sent = json.dumps(scripted_model.requests[0].messages)
    assert "Start a fresh topic: honey recipes." in sent  # the nanobot conversation is replayed
    assert "The user is Ada; she keeps bees on a roof in Lyon." in sent  # and what its Dream kept

    log = run_cli(["memory", "log"], hippobot_home)
    assert log.returncode == 0, log.stderr
    assert "dream: manual run" in log.stdout

    assert snapshot_tree(source) == before  # every nanobot file byte-identical, same mtime

    again = run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert again.returncode == 0, again.stderr
    assert "brought" not in again.stdout and "Nothing new" in again.stdout
    assert snapshot_tree(source) == before


def test_must_show_nanobots_raw_config_copied_to_hippobot_works(
    hippobot_home, scripted_server, scripted_model, monkeypatch
):
    # its workspace is "~/.nanobot/workspace": a home of the test's own, not the machine's
    monkeypatch.setenv("HOME", str(hippobot_home))
    shutil.copy(FIXTURES / "nanobot-0.3.5" / "config.json", hippobot_home / "config.json")
    scripted_model.reply("hello from hippobot")
    out = run_cli(["agent", "-m", "hi"], hippobot_home, scripted_server)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from hippobot\n"
    assert "Traceback" not in out.stderr and "unknown key" not in out.stderr
    assert out.stderr.count("not used by hippobot") == 1


def test_a_0_2_2_home_imports_its_in_workspace_sessions(nanobot_home, hippobot_home):
    source = nanobot_home("0.2.2")
    before = snapshot_tree(source)
    out = run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert out.returncode == 0, out.stderr
    assert "Importing nanobot 0.2.x home" in out.stdout
    listed = run_cli(["sessions", "list", "--json"], hippobot_home)
    assert sorted(i["key"] for i in json.loads(listed.stdout)) == ["cli:direct", "telegram:4242"]
    shown = run_cli(["sessions", "show", "telegram:4242", "--json"], hippobot_home)
    messages = json.loads(shown.stdout)["messages"]
    assert messages[0]["text"].startswith("Hello from my phone.")
    assert messages[0]["timestamp"][-6] in "+-"  # nanobot's naive time made aware
    assert "dream: manual run" in run_cli(["memory", "log"], hippobot_home).stdout
    assert snapshot_tree(source) == before


def test_a_second_run_adds_what_nanobot_wrote_since(nanobot_home, hippobot_home):
    source = nanobot_home("0.3.5")
    assert run_cli(["import", "nanobot", str(source)], hippobot_home).returncode == 0
    # nanobot keeps running: one more turn in a session and one more history entry.
    session_file = next(source.glob("sessions/*/dGVsZWdyYW06NDI0Mg.jsonl"))
    with session_file.open("a") as handle:
        handle.write(json.dumps({"role": "user", "content": "Still there?", "timestamp": "2026-12-01T10:00:00"}) + "\n")
    history = source / "workspace" / "memory" / "history.jsonl"
    with history.open("a") as handle:
        handle.write(json.dumps({"cursor": 2, "timestamp": "2026-12-01 10:00", "content": "Ada asked again."}) + "\n")
    (source / "workspace" / "memory" / ".cursor").write_text("2")

    out = run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert out.returncode == 0, out.stderr
    brought = [line for line in out.stdout.splitlines() if line.startswith("brought")]
    assert brought == [
        "brought  memory/history.jsonl (+1 new entries)",
        "brought  memory/.cursor (2)",
        "brought  session telegram:4242 (+1 new messages)",
    ]
    shown = run_cli(["sessions", "show", "telegram:4242", "--json"], hippobot_home)
    assert json.loads(shown.stdout)["messages"][-1]["text"] == "Still there?"
    assert run_cli(["import", "nanobot", str(source)], hippobot_home).stdout.count("brought") == 0


def test_a_session_both_sides_continued_is_kept_and_reported(
    nanobot_home, hippobot_home, scripted_server, scripted_model
):
    source = nanobot_home("0.3.5")
    run_cli(["import", "nanobot", str(source)], hippobot_home)
    without_idle_compaction(hippobot_home)
    scripted_model.reply("ok")
    assert run_cli(["agent", "-s", "telegram:4242", "-m", "hippobot turn"], hippobot_home, scripted_server).returncode == 0
    session_file = next(source.glob("sessions/*/dGVsZWdyYW06NDI0Mg.jsonl"))
    with session_file.open("a") as handle:
        handle.write(json.dumps({"role": "user", "content": "nanobot turn"}) + "\n")
    out = run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert "skipped  session telegram:4242 (kept hippobot's: both hippobot and nanobot added to it since)" in out.stdout
    shown = json.loads(run_cli(["sessions", "show", "telegram:4242", "--json"], hippobot_home).stdout)
    assert [m["text"] for m in shown["messages"]][-2:] == ["hippobot turn", "ok"]


def test_importing_after_onboard_replaces_untouched_templates_and_the_fresh_git(nanobot_home, hippobot_home):
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    source = nanobot_home("0.3.5")
    out = run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert out.returncode == 0, out.stderr
    assert "brought  memory/MEMORY.md" in out.stdout
    assert "brought  config.json" in out.stdout  # the starter config was untouched
    memory = (hippobot_home / "workspace" / "memory" / "MEMORY.md").read_text()
    assert "Ada; she keeps bees" in memory
    assert "dream: manual run" in run_cli(["memory", "log"], hippobot_home).stdout


def test_files_the_user_changed_here_are_kept(nanobot_home, hippobot_home):
    run_cli(["onboard"], hippobot_home)
    soul = hippobot_home / "workspace" / "SOUL.md"
    soul.write_text("# Soul\nMine.\n")
    (hippobot_home / "config.json").write_text('{"agents": {"defaults": {"model": "mine"}}}')
    out = run_cli(["import", "nanobot", str(nanobot_home("0.3.5"))], hippobot_home)
    assert out.returncode == 0, out.stderr
    assert "skipped  SOUL.md (kept hippobot's; it differs from nanobot's)" in out.stdout
    assert "skipped  config.json (kept" in out.stdout
    assert soul.read_text() == "# Soul\nMine.\n"
    assert json.loads((hippobot_home / "config.json").read_text())["agents"]["defaults"]["model"] == "mine"


def test_the_imported_config_is_private_and_loads_without_warnings(nanobot_home, hippobot_home):
    run_cli(["import", "nanobot", str(nanobot_home("0.3.5"))], hippobot_home)
    config = hippobot_home / "config.json"
    assert config.stat().st_mode & 0o077 == 0
    data = json.loads(config.read_text())
    assert data["providers"] == {"custom": {"apiKey": SECRET, "apiBase": "http://127.0.0.1:9/v1"}}
    assert "workspace" not in data["agents"]["defaults"]
    out = run_cli(["sessions", "list"], hippobot_home)
    assert out.returncode == 0 and out.stderr == ""


def _with_file_size_limit(limit: int) -> None:
    """In the child: writes past ``limit`` bytes of a file fail (EFBIG), like a full quota."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_config_write_that_fails_midway_leaves_the_old_config_and_no_copy_of_the_keys(
    nanobot_home, hippobot_home
):
    source = nanobot_home("0.3.5")
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    config = hippobot_home / "config.json"
    before, files = config.read_bytes(), sorted(hippobot_home.rglob("*"))
    env = {**caller_env(), "HIPPOBOT_HOME": str(hippobot_home)}
    # nanobot's config, as hippobot's, is 620 bytes: only its first 512 reach the disk.
    out = subprocess.run([sys.executable, "-m", "hippobot", "import", "nanobot", str(source)],
                         env=env, capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: _with_file_size_limit(512))
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert config.read_bytes() == before  # the starter config, whole
    assert sorted(hippobot_home.rglob("*")) == files  # no half-written copy beside it
    assert not any(SECRET in p.read_text(errors="replace") for p in files if p.is_file())
    assert out.stderr.startswith(f"error: could not write {config}")

    again = run_cli(["import", "nanobot", str(source)], hippobot_home)  # the disk has room again
    assert again.returncode == 0, again.stderr
    assert json.loads(config.read_text())["providers"]["custom"]["apiKey"] == SECRET


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_a_folder_that_is_no_nanobot_home_is_one_clear_line(tmp_path, hippobot_home, where):
    target = tmp_path / "nothing"
    if where == "empty":
        target.mkdir()
    out = run_cli(["import", "nanobot", str(target)], hippobot_home)
    assert out.returncode == 1
    assert out.stderr.startswith("error: no nanobot home at") and out.stderr.count("\n") == 1


def test_nanobots_idle_compaction_setting_is_carried_and_archives_the_old_chat_first(
    nanobot_home, hippobot_home, scripted_server, scripted_model
):
    source = nanobot_home("0.3.5")
    run_cli(["import", "nanobot", str(source)], hippobot_home)
    assert json.loads((hippobot_home / "config.json").read_text())["agents"]["defaults"][
        "idleCompactAfterMinutes"] == 15
    # The fixture's chat is older than 15 minutes: the next turn archives it, then answers.
    scripted_model.reply("- [durable] Ada asked about honey recipes").reply("Welcome back.")
    out = run_cli(["agent", "-s", "cli:direct", "-m", "Hello again"], hippobot_home, scripted_server)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Welcome back.\n"
    history = (hippobot_home / "workspace" / "memory" / "history.jsonl").read_text()
    assert "Ada asked about honey recipes" in history
    assert "Ada asked about honey recipes" in json.dumps(scripted_model.requests[-1].messages)
