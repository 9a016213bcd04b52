"""Commands that only show things never change the workspace, even one that reading could
"fix" (an unmigrated nanobot history, a garbled cursor, a session with a broken line), and
never create a workspace that does not exist."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.testing.cli import run_cli as run

READ_COMMANDS = [
    ["memory", "show"],
    ["memory", "show", "--json"],
    ["memory", "history"],
    ["memory", "history", "--pending", "--json"],
    ["memory", "search", "tea"],
    ["memory", "log"],
    ["memory", "restore"],  # without a version: only lists them
    ["sessions", "list"],
    ["sessions", "show", "cli:direct"],
    ["usage"],
    ["context"],
    ["status", "--json"],
]
# The search index is derived state: searching brings it up to date with the files.
DERIVED = "workspace/.hippobot/recall.sqlite3"


def tree(root: Path) -> dict[str, object]:
    """Every file's bytes, size and mtime, and every folder's entries."""
    out: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        names = sorted(n for n in dirs + files if not f"{rel}/{n}".startswith(DERIVED))
        out[rel + "/"] = names
        for name in files:
            path = Path(folder) / name
            key = path.relative_to(root).as_posix()
            if key.startswith(DERIVED):
                continue
            info = path.lstat()
            out[key] = (info.st_size, info.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def test_read_commands_leave_every_file_as_it_was(hippobot_home):
    workspace = load_settings({"HIPPOBOT_HOME": str(hippobot_home)}).workspace
    onboard(load_settings({"HIPPOBOT_HOME": str(hippobot_home)}))
    memory = workspace / "memory"
    # nanobot's archive, not migrated yet: a writing command would migrate it
    (memory / "HISTORY.md").write_text("[2026-01-02 10:00] User likes green tea.\n\n"
                                       "[2026-01-03 11:00] User owns a boat.\n")
    (memory / ".cursor").write_text("not a number")  # a writer would repair it
    session = workspace / "sessions" / "cli" / "direct.jsonl"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text(
        json.dumps({"role": "user", "content": "I like tea", "timestamp": "2026-01-04T10:00:00"}) + "\n"
        + '{"role": "narrator", "content": "broken"}\n'  # a reader that writes would quarantine it
        + json.dumps({"role": "assistant", "content": "Noted.", "timestamp": "2026-01-04T10:00:01"}) + "\n"
    )
    assert run(["memory", "search", "tea"], hippobot_home).returncode == 0  # builds the index
    before = tree(hippobot_home)

    outputs = {}
    for args in READ_COMMANDS:
        done = run(args, hippobot_home)
        assert done.returncode == 0, (args, done.stderr)
        outputs[" ".join(args)] = done.stdout
        assert tree(hippobot_home) == before, args

    # What they show is what a migration would bring, without migrating.
    assert "User likes green tea." in outputs["memory history"]
    history = json.loads(outputs["memory history --pending --json"])
    assert history == []  # migrated entries count as processed
    assert "I like tea" in outputs["sessions show cli:direct"]
    assert "Noted." in outputs["sessions show cli:direct"]
    assert not (memory / "history.jsonl").exists() and not session.with_suffix(".jsonl.corrupt").exists()


def test_read_commands_on_a_missing_workspace_create_nothing(hippobot_home):
    for args in READ_COMMANDS:
        done = run(args, hippobot_home)
        if args[:2] == ["sessions", "show"]:
            assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
            assert "sessions list" in done.stderr
        else:
            assert done.returncode == 0, (args, done.stderr)
        assert list(hippobot_home.iterdir()) == [], args
    assert run(["memory", "search", "tea"], hippobot_home).stdout == "No matches.\n"
