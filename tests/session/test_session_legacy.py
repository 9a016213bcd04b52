"""nanobot v0.2.x workspaces keep working: their session files migrate on first use."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hippobot.session import JsonlSessionStore, SessionManager
from hippobot.session.model import SessionUsage

FIXTURE = Path(__file__).parent / "fixtures" / "nanobot_v0_2_telegram_8281248569.jsonl"
KEY = "telegram:8281248569"


def nanobot_workspace(tmp_path: Path) -> Path:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    shutil.copy(FIXTURE, sessions / "telegram_8281248569.jsonl")
    return tmp_path


def test_legacy_session_is_migrated_and_the_old_file_kept(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    session = JsonlSessionStore(workspace).load(KEY)

    assert session is not None
    assert [m["role"] for m in session.messages] == [
        "user", "assistant", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert session.last_consolidated == 2
    assert session.summary is not None and session.summary.text == "- User prefers replies in German"
    assert session.usage == SessionUsage(prompt_tokens=1834, completion_tokens=41, cached_tokens=1792)
    assert session.metadata == {"title": "Backup status"}
    assert session.created_at.startswith("2026-03-20T09:14:02.118")
    assert session.created_at[-6] in "+-"  # naive nanobot time became aware local time

    old = workspace / "sessions" / "telegram_8281248569.jsonl"
    assert not old.exists()
    assert old.with_name(old.name + ".migrated").read_bytes() == FIXTURE.read_bytes()
    canonical = workspace / "sessions" / "telegram" / "8281248569.jsonl"
    first = json.loads(canonical.read_text("utf-8").splitlines()[0])
    assert first["_type"] == "session" and first["key"] == KEY

    # Another process (fresh store) reads the canonical file; nothing migrates twice.
    again = JsonlSessionStore(workspace).load(KEY)
    assert again is not None and again.messages == session.messages
    history = again.get_history()
    assert history[0]["content"] == "Wie ist der Status vom Backup-Job?"


def test_migrated_session_keeps_growing_by_appends(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    store = JsonlSessionStore(workspace)
    session = store.load(KEY)
    assert session is not None
    canonical = store.path_for(KEY)
    before = canonical.read_bytes()
    store.append(session, [session.add({"role": "user", "content": "Danke"})])
    assert canonical.read_bytes().startswith(before)
    reloaded = JsonlSessionStore(workspace).load(KEY)
    assert reloaded is not None and reloaded.messages[-1]["content"] == "Danke"


def test_unmigrated_legacy_sessions_are_listed(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    (workspace / "sessions" / "stray.jsonl").write_text("no metadata line\n")
    infos = JsonlSessionStore(workspace).list()
    assert [i.key for i in infos] == [KEY]
    assert infos[0].message_count == 6
    assert infos[0].preview == "Hallo!"
    assert infos[0].path == workspace / "sessions" / "telegram_8281248569.jsonl"


def test_manager_get_migrates_transparently(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    manager = SessionManager(JsonlSessionStore(workspace))
    session = manager.get(KEY)
    assert len(session.messages) == 6
    assert [i.key for i in manager.list()] == [KEY]
    assert [i.path for i in manager.list()] == [workspace / "sessions" / "telegram" / "8281248569.jsonl"]


def test_delete_removes_an_unmigrated_legacy_session(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    store = JsonlSessionStore(workspace)
    assert store.delete(KEY) is True
    assert store.list() == []
    assert store.load(KEY) is None
