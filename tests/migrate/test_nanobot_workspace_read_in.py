"""hippobot pointed at a nanobot workspace (a copied config.json, HIPPOBOT_WORKSPACE or
--workspace) reads it in and works in its own: nothing is ever created or changed in
nanobot's tree, whatever the command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hippobot.testing.cli import run_cli

from .conftest import FIXTURES


def full_snapshot(root: Path) -> dict[str, tuple[bytes, int] | str]:
    """Every file (bytes, mtime in ns) and every folder under ``root``."""
    out: dict[str, tuple[bytes, int] | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = (path.read_bytes(), path.stat().st_mtime_ns) if path.is_file() else "dir"
    return out


def copied_config_home(tmp_path: Path, nanobot_home) -> tuple[Path, Path, dict[str, str]]:
    """nanobot 0.3.5 in ``~/.nanobot`` and its config.json copied as it is into hippobot's
    home (its workspace: ``~/.nanobot/workspace``)."""
    home_dir = tmp_path / "user"
    source = nanobot_home("0.3.5")
    shutil.move(source, home_dir / ".nanobot")
    hippobot_home = home_dir / ".hippobot"
    hippobot_home.mkdir()
    config = json.loads((FIXTURES / "nanobot-0.3.5" / "config.json").read_text())
    config["agents"]["defaults"]["idleCompactAfterMinutes"] = 0  # the fixture's chats are old
    (hippobot_home / "config.json").write_text(json.dumps(config))
    return home_dir / ".nanobot", hippobot_home, {"HOME": str(home_dir)}


def test_a_copied_nanobot_config_reads_nanobots_workspace_and_never_writes_there(
    tmp_path, nanobot_home, scripted_server, scripted_model
):
    nanobot, home, env = copied_config_home(tmp_path, nanobot_home)
    before = full_snapshot(nanobot)
    scripted_model.reply("Your bees, on the roof in Lyon.")

    for args in (
        ["status"], ["context"], ["sessions", "list"], ["sessions", "show", "cli:direct"],
        ["memory", "show"], ["memory", "search", "bees"], ["memory", "history"], ["memory", "log"],
        ["dream"], ["agent", "-m", "What do I keep on the roof?"], ["status", "--json"],
    ):
        out = run_cli(args, home, scripted_server if args[0] == "agent" else None, **env)
        assert out.returncode == 0, (args, out.stderr)

    assert full_snapshot(nanobot) == before  # not a byte, an mtime or a new folder
    own = home / "workspace"
    sent = json.dumps(scripted_model.requests[0].messages)
    assert "Start a fresh topic: honey recipes." in sent  # nanobot's conversation, replayed
    assert "she keeps bees on a roof in Lyon" in sent  # nanobot's MEMORY.md, in the prompt
    assert "What do I keep on the roof?" in (own / "sessions" / "cli" / "direct.jsonl").read_text()
    status = json.loads(run_cli(["status", "--json"], home, **env).stdout)
    assert status["workspace"] == str(own)
    assert "dream: manual run" in run_cli(["memory", "log"], home, **env).stdout  # nanobot's history


def test_the_first_command_says_what_it_read_in_and_later_ones_are_silent(tmp_path, nanobot_home):
    nanobot, home, env = copied_config_home(tmp_path, nanobot_home)
    first = run_cli(["sessions", "list"], home, **env)
    assert f"read nanobot's workspace {nanobot / 'workspace'} into hippobot's {home / 'workspace'}" in first.stderr
    assert "brought memory history (2 commits" in first.stderr
    record = home / "workspace" / ".hippobot" / "nanobot-sync.json"
    stamp = record.stat().st_mtime_ns
    again = run_cli(["sessions", "list"], home, **env)
    assert "read nanobot's workspace" not in again.stderr and again.stdout == first.stdout
    assert record.stat().st_mtime_ns == stamp  # nothing changed at nanobot's: nothing opened


def test_what_nanobot_changes_later_is_read_in_unless_hippobot_changed_it_too(tmp_path, nanobot_home):
    nanobot, home, env = copied_config_home(tmp_path, nanobot_home)
    assert run_cli(["status"], home, **env).returncode == 0
    own = home / "workspace"
    # nanobot keeps running: it edits USER.md and MEMORY.md; the user edited MEMORY.md here.
    (nanobot / "workspace" / "USER.md").write_text("# User\n\nAda, beekeeper.\n")
    (nanobot / "workspace" / "memory" / "MEMORY.md").write_text("# Memory\n\n- from nanobot\n")
    (own / "memory" / "MEMORY.md").write_text("# Memory\n\n- edited in hippobot\n")

    out = run_cli(["status"], home, **env)

    assert "brought USER.md" in out.stderr
    assert "kept memory/MEMORY.md (kept hippobot's; it differs from nanobot's)" in out.stderr
    assert (own / "USER.md").read_text() == "# User\n\nAda, beekeeper.\n"
    assert (own / "memory" / "MEMORY.md").read_text() == "# Memory\n\n- edited in hippobot\n"
    (nanobot / "workspace" / "SOUL.md").write_text("# Soul\n\nCalm.\n")  # something else changes
    later = run_cli(["status"], home, **env)
    assert "brought SOUL.md" in later.stderr and "MEMORY.md" not in later.stderr  # said once


@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_0_2_x_workspace_given_in_place_is_read_in_too(nanobot_home, hippobot_home, scripted_server, scripted_model, how):
    workspace = nanobot_home("0.2.2") / "workspace"
    before = full_snapshot(workspace.parent)
    scripted_model.reply("Hi again.")
    where = {"HIPPOBOT_WORKSPACE": str(workspace)} if how == "env" else {}
    flag = ["--workspace", str(workspace)] if how == "flag" else []

    listed = run_cli(["sessions", "list", "--json", *flag], hippobot_home, **where)
    turn = run_cli(["agent", "-s", "telegram:4242", "-m", "Back on the phone.", *flag],
                   hippobot_home, scripted_server, **where)

    assert sorted(i["key"] for i in json.loads(listed.stdout)) == ["cli:direct", "telegram:4242"]
    assert turn.returncode == 0, turn.stderr
    assert "Hello from my phone." in json.dumps(scripted_model.requests[0].messages)
    assert full_snapshot(workspace.parent) == before
    assert (hippobot_home / "workspace" / "sessions" / "telegram" / "4242.jsonl").exists()
    # nanobot writes to its own file later: hippobot says so once rather than silently.
    with (workspace / "sessions" / "telegram_4242.jsonl").open("a") as handle:
        handle.write(json.dumps({"role": "user", "content": "from nanobot"}) + "\n")
    shown = run_cli(["sessions", "show", "telegram:4242", *flag], hippobot_home, **where)
    assert "session telegram:4242 (kept hippobot's: both hippobot and nanobot added to it since)" in shown.stderr
    assert "Back on the phone." in shown.stdout and "from nanobot" not in shown.stdout
    assert "telegram:4242" not in run_cli(["status", *flag], hippobot_home, **where).stderr


def test_a_link_in_nanobots_workspace_is_not_followed_into_hippobots(tmp_path, nanobot_home):
    nanobot, home, env = copied_config_home(tmp_path, nanobot_home)
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN PRIVATE KEY-----\n")
    user = nanobot / "workspace" / "USER.md"
    user.unlink()
    user.symlink_to(secret)

    out = run_cli(["status"], home, **env)

    assert out.returncode == 0, out.stderr
    assert f"USER.md (a symbolic link to {secret}, outside" in out.stderr
    copied = home / "workspace" / "USER.md"
    assert not copied.exists() or "PRIVATE KEY" not in copied.read_text()
