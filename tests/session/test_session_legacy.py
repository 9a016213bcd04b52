"""nanobot v0.2.x workspaces keep working: hippobot reads their session files as they are and
writes its own copy only when the session changes; nanobot's file is never touched."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
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


def test_loading_a_legacy_session_reads_it_and_writes_nothing(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    old = workspace / "sessions" / "telegram_8281248569.jsonl"
    stat = old.stat()
    session = JsonlSessionStore(workspace).load(KEY)

    assert session is not None
    assert [m["role"] for m in session.messages] == [
        "user", "assistant", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert session.last_consolidated == 2
    assert session.summary is not None and session.summary.text == "- User prefers replies in German"
    assert session.usage == SessionUsage(prompt_tokens=1834, completion_tokens=41, cached_tokens=1792)
    assert session.metadata["title"] == "Backup status"
    assert session.metadata["migrated_from"]["file"] == old.name
    assert session.created_at.startswith("2026-03-20T09:14:02.118")
    assert session.created_at[-6] in "+-"  # naive nanobot time became aware local time
    stamps = [m["timestamp"] for m in session.messages if "timestamp" in m]
    assert stamps and all(datetime.fromisoformat(t).tzinfo is not None for t in stamps)

    # nanobot's file is untouched and nothing else was written.
    assert old.read_bytes() == FIXTURE.read_bytes() and old.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in (workspace / "sessions").iterdir()) == [old.name]
    assert not (workspace / "sessions" / "telegram").exists()
    history = session.get_history()
    assert history[0]["content"] == "Wie ist der Status vom Backup-Job?"


def test_the_first_write_creates_hippobots_copy_and_leaves_nanobots(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    store = JsonlSessionStore(workspace)
    session = store.load(KEY)
    assert session is not None
    store.append(session, [session.add({"role": "user", "content": "Danke"})])
    canonical = workspace / "sessions" / "telegram" / "8281248569.jsonl"
    first = json.loads(canonical.read_text("utf-8").splitlines()[0])
    assert first["_type"] == "session" and first["key"] == KEY
    assert (workspace / "sessions" / "telegram_8281248569.jsonl").read_bytes() == FIXTURE.read_bytes()
    again = JsonlSessionStore(workspace).load(KEY)
    assert again is not None and len(again.messages) == 7


def test_a_legacy_file_changed_after_the_takeover_is_reported_not_silently_shadowed(
    tmp_path: Path, caplog
) -> None:
    workspace = nanobot_workspace(tmp_path)
    store = JsonlSessionStore(workspace)
    session = store.load(KEY)
    assert session is not None
    store.append(session, [session.add({"role": "user", "content": "Danke"})])
    caplog.clear()
    assert JsonlSessionStore(workspace).load(KEY) is not None
    assert "changed after hippobot" not in caplog.text  # nanobot's file is the version taken over

    old = workspace / "sessions" / "telegram_8281248569.jsonl"
    with old.open("a") as handle:  # nanobot keeps writing to its own copy
        handle.write(json.dumps({"role": "user", "content": "Noch da?"}) + "\n")
    reloaded = JsonlSessionStore(workspace).load(KEY)
    assert reloaded is not None and reloaded.messages[-1]["content"] == "Danke"  # hippobot's copy
    assert "telegram_8281248569.jsonl for session 'telegram:8281248569' changed after hippobot" in caplog.text
    caplog.clear()
    assert [i.key for i in JsonlSessionStore(workspace).list()] == [KEY]


def test_migrated_session_keeps_growing_by_appends(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    store = JsonlSessionStore(workspace)
    session = store.load(KEY)
    assert session is not None
    canonical = store.path_for(KEY)
    store.append(session, [session.add({"role": "user", "content": "Danke"})])
    before = canonical.read_bytes()
    store.append(session, [session.add({"role": "user", "content": "Bis bald"})])
    assert canonical.read_bytes().startswith(before)
    reloaded = JsonlSessionStore(workspace).load(KEY)
    assert reloaded is not None and reloaded.messages[-1]["content"] == "Bis bald"


def test_unmigrated_legacy_sessions_are_listed(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    (workspace / "sessions" / "stray.jsonl").write_text("no metadata line\n")
    infos = JsonlSessionStore(workspace).list()
    assert [i.key for i in infos] == [KEY]
    assert infos[0].message_count == 6
    assert infos[0].preview == "Hallo!"
    assert infos[0].path == workspace / "sessions" / "telegram_8281248569.jsonl"


def test_manager_get_reads_transparently(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    manager = SessionManager(JsonlSessionStore(workspace))
    session = manager.get(KEY)
    assert len(session.messages) == 6
    assert [i.key for i in manager.list()] == [KEY]
    assert [i.path for i in manager.list()] == [workspace / "sessions" / "telegram_8281248569.jsonl"]


def test_delete_removes_an_unmigrated_legacy_session(tmp_path: Path) -> None:
    workspace = nanobot_workspace(tmp_path)
    store = JsonlSessionStore(workspace)
    assert store.delete(KEY) is True
    assert store.list() == []
    assert store.load(KEY) is None
