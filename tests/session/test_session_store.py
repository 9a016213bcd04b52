"""JSONL session files: append-only writes, forgiving reads, crashes and two processes."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from hippobot.errors import StorageError, UserError
from hippobot.messages import Message
from hippobot.session import JsonlSessionStore, Session, SessionInfo
from hippobot.session.model import ArchivedSummary, SessionUsage

KEY = "cli:direct"


def file_of(workspace: Path, key: str = KEY) -> Path:
    return JsonlSessionStore(workspace).path_for(key)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def turn(store: JsonlSessionStore, session: Session, n: int) -> None:
    """One chat turn as the agent loop saves it: messages appended, then pointers."""
    added = [
        session.add({"role": "user", "content": f"question {n:04d}"}),
        session.add({"role": "assistant", "content": f"answer {n:04d}"}),
    ]
    store.append(session, added)
    session.usage = SessionUsage(prompt_tokens=1000, completion_tokens=10, cached_tokens=900,
                                 messages_at=len(session.messages))
    store.save_meta(session)


def test_round_trip_on_a_real_file(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    messages: list[Message] = [
        {"role": "user", "content": "Grüße 你好 🎉\nline two",
         "_runtime_context": {"version": 1, "suffix": "[Runtime]"}},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{\"x\": 1}"}}
        ], "reasoning_content": "thinking"},
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "done"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "file://x.png"}}]},
    ]
    stored = [session.add(m) for m in messages]
    store.append(session, stored)
    session.last_consolidated = 2
    session.summary = ArchivedSummary("- likes tea", "2026-04-03T10:00:00+02:00")
    session.metadata["title"] = "Greetings"
    store.save_meta(session)

    path = tmp_path / "sessions" / "cli" / "direct.jsonl"
    header = records(path)[0]
    assert header == {"_type": "session", "format": 1, "key": KEY,
                      "created_at": session.created_at}
    assert "Grüße 你好 🎉" in path.read_text("utf-8")  # readable, not \u-escaped

    loaded = JsonlSessionStore(tmp_path).load(KEY)
    assert loaded is not None
    assert loaded.messages == session.messages
    assert loaded.last_consolidated == 2
    assert loaded.summary == session.summary
    assert loaded.metadata == {"title": "Greetings"}
    assert loaded.created_at == session.created_at
    assert loaded.updated_at == session.updated_at


def test_missing_session_loads_as_none(tmp_path: Path) -> None:
    assert JsonlSessionStore(tmp_path).load("cli:nobody") is None


def test_saving_a_turn_only_appends(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    path = file_of(tmp_path)
    turn(store, session, 0)
    written: list[int] = []
    for n in range(1, 60):
        before = path.read_bytes()
        turn(store, session, n)
        after = path.read_bytes()
        assert after.startswith(before)  # earlier bytes never touched
        written.append(len(after) - len(before))
    # Bytes per turn do not grow with the session (only digit counts may differ).
    assert max(written) - min(written) <= 4
    assert max(written) < 600


def test_last_meta_record_wins(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    for n in range(3):
        turn(store, session, n)
        session.last_consolidated = 2 * (n + 1)
        session.metadata = {"round": n}
        store.save_meta(session)
    metas = [r for r in records(file_of(tmp_path)) if r.get("_type") == "meta"]
    assert len(metas) == 6
    loaded = JsonlSessionStore(tmp_path).load(KEY)
    assert loaded is not None
    assert (loaded.last_consolidated, loaded.metadata) == (6, {"round": 2})
    assert loaded.usage == SessionUsage(prompt_tokens=1000, completion_tokens=10,
                                        cached_tokens=900, messages_at=6)


def test_new_session_file_has_no_meta_noise(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key="telegram:42")
    store.append(session, [session.add({"role": "user", "content": "hi"})])
    kinds = [r.get("_type", r.get("role")) for r in records(file_of(tmp_path, "telegram:42"))]
    assert kinds == ["session", "user"]


def test_torn_last_line_is_skipped_quarantined_once_and_isolated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    turn(store, session, 1)
    path = file_of(tmp_path)
    torn = b'{"role": "assistant", "content": "half a rep'
    with path.open("ab") as handle:
        handle.write(torn)  # the process died mid-write

    with caplog.at_level(logging.WARNING):
        first = JsonlSessionStore(tmp_path).load(KEY)
        second_store = JsonlSessionStore(tmp_path)
        second = second_store.load(KEY)
    assert first is not None and second is not None
    assert [m["content"] for m in second.messages] == ["question 0001", "answer 0001"]
    corrupt = path.with_name("direct.jsonl.corrupt")
    assert corrupt.read_bytes() == torn + b"\n"  # copied once, not once per load
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "direct.jsonl" in warnings[0].getMessage()

    second_store.append(second, [second.add({"role": "user", "content": "after the crash"})])
    assert path.read_bytes().count(torn + b"\n") == 1  # the torn line stays on its own line
    again = JsonlSessionStore(tmp_path).load(KEY)
    assert again is not None
    assert [m["content"] for m in again.messages][-1] == "after the crash"
    assert corrupt.read_bytes() == torn + b"\n"


def test_corrupt_middle_line_keeps_everything_else(tmp_path: Path) -> None:
    path = file_of(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(
        '{"_type":"session","format":1,"key":"cli:direct","created_at":"2026-01-01T00:00:00+00:00"}\n'
        '{"role":"user","content":"one"}\n'
        "this is not json\n"
        '["a list"]\n'
        '{"role":"robot","content":"bad role"}\n'
        "\n"
        '{"role":"assistant","content":"two"}\n',
        "utf-8",
    )
    loaded = JsonlSessionStore(tmp_path).load(KEY)
    assert loaded is not None
    assert [m["content"] for m in loaded.messages] == ["one", "two"]
    assert loaded.created_at == "2026-01-01T00:00:00+00:00"
    quarantined = path.with_name("direct.jsonl.corrupt").read_text("utf-8").splitlines()
    assert quarantined == ["this is not json", '["a list"]', '{"role":"robot","content":"bad role"}']


def test_corrupt_header_still_loads_messages_with_key_from_path(tmp_path: Path) -> None:
    path = file_of(tmp_path, "telegram:7")
    path.parent.mkdir(parents=True)
    path.write_bytes(
        b'{"_type":"session","format":1,"key":"telegr\x00\xff\n'
        b'{"role":"user","content":"still here","timestamp":"2026-02-02T09:00:00+00:00"}\n'
    )
    loaded = JsonlSessionStore(tmp_path).load("telegram:7")
    assert loaded is not None
    assert loaded.key == "telegram:7"
    assert [m["content"] for m in loaded.messages] == ["still here"]
    assert loaded.created_at == "2026-02-02T09:00:00+00:00"


def test_wholly_unreadable_file_is_never_replaced(tmp_path: Path) -> None:
    path = file_of(tmp_path)
    path.parent.mkdir(parents=True)
    garbage = bytes(range(256)) * 4  # binary, no trailing newline
    path.write_bytes(garbage)
    store = JsonlSessionStore(tmp_path)
    session = store.load(KEY)
    assert session is not None and session.messages == []
    store.append(session, [session.add({"role": "user", "content": "new start"})])
    store.save_meta(session)
    assert path.read_bytes().startswith(garbage)
    reloaded = JsonlSessionStore(tmp_path).load(KEY)
    assert reloaded is not None
    assert [m["content"] for m in reloaded.messages] == ["new start"]


def test_newer_format_is_refused_with_an_instruction(tmp_path: Path) -> None:
    path = file_of(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"_type":"session","format":9,"key":"cli:direct","created_at":"x"}\n')
    with pytest.raises(UserError, match="upgrade hippobot"):
        JsonlSessionStore(tmp_path).load(KEY)


def test_two_processes_see_each_others_turns(tmp_path: Path) -> None:
    store_a, store_b = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path)
    a = Session(key=KEY)
    store_a.append(a, [a.add({"role": "user", "content": "u1"})])

    b = store_b.load(KEY)
    assert b is not None
    store_b.append(b, [b.add({"role": "assistant", "content": "a1"})])
    assert store_a.refresh(a) == 1
    assert store_a.refresh(a) == 0

    # A writes without refreshing first: its append picks up B's line and keeps the order.
    store_b.append(b, [b.add({"role": "user", "content": "u2"})])
    store_a.append(a, [a.add({"role": "assistant", "content": "a2"})])
    assert [m["content"] for m in a.messages] == ["u1", "a1", "u2", "a2"]
    assert store_b.refresh(b) == 1
    assert [m["content"] for m in b.messages] == ["u1", "a1", "u2", "a2"]

    # B consolidates; A adopts the pointer because it had not changed it itself.
    b.last_consolidated = 2
    store_b.save_meta(b)
    store_a.refresh(a)
    assert a.last_consolidated == 2

    fresh = JsonlSessionStore(tmp_path).load(KEY)
    assert fresh is not None
    assert [m["content"] for m in fresh.messages] == ["u1", "a1", "u2", "a2"]


def test_a_new_session_object_merges_a_file_another_process_created(tmp_path: Path) -> None:
    store_a, store_b = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path)
    b = Session(key=KEY)  # B found no file and started a session in memory
    a = Session(key=KEY)
    store_a.append(a, [a.add({"role": "user", "content": "from a"})])
    store_b.append(b, [b.add({"role": "user", "content": "from b"})])
    assert [m["content"] for m in b.messages] == ["from a", "from b"]
    kinds = [r.get("_type", "msg") for r in records(file_of(tmp_path))]
    assert kinds == ["session", "msg", "msg"]  # one header only


def test_concurrent_writers_never_lose_or_interleave_lines(tmp_path: Path) -> None:
    views: list[tuple[JsonlSessionStore, Session]] = []

    def writer(name: str) -> None:
        store = JsonlSessionStore(tmp_path)  # one store per "process"
        session = store.load(KEY) or Session(key=KEY)
        views.append((store, session))
        for n in range(40):
            text = f"{name}-{n:03d}-" + name * 2000  # long lines make interleaving visible
            store.append(session, [session.add({"role": "user", "content": text})])

    threads = [threading.Thread(target=writer, args=(name,)) for name in "xyz"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    path = file_of(tmp_path)
    assert not path.with_name("direct.jsonl.corrupt").exists()
    loaded = JsonlSessionStore(tmp_path).load(KEY)
    assert loaded is not None
    texts = [m["content"][:6] for m in loaded.messages]
    assert len(texts) == 120
    for name in "xyz":
        assert [t for t in texts if t[0] == name] == [f"{name}-{n:03d}-" for n in range(40)]
    assert sum(1 for r in records(path) if r.get("_type") == "session") == 1
    for store, session in views:  # every writer's view converges on the file's order
        store.refresh(session)
        assert session.messages == loaded.messages


def test_disk_full_raises_storage_error_and_leaves_the_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    turn(store, session, 1)
    path = file_of(tmp_path)
    before = path.read_bytes()
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 4:  # write a torn half, as a full disk may, then fail
            real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    msg = session.add({"role": "user", "content": "will not fit"})
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", half_then_full)
        with pytest.raises(StorageError) as err:
            store.append(session, [msg])
    assert "direct.jsonl" in str(err.value) and "No space left" in str(err.value)
    assert "\n" not in str(err.value)
    assert path.read_bytes() == before

    session.messages.remove(msg)
    turn(store, session, 2)  # the disk has room again: writing just continues
    loaded = JsonlSessionStore(tmp_path).load(KEY)
    assert loaded is not None
    assert [m["content"] for m in loaded.messages] == [
        "question 0001", "answer 0001", "question 0002", "answer 0002",
    ]  # fmt: skip


def test_rewrite_replaces_atomically_and_others_notice(tmp_path: Path) -> None:
    store_a, store_b = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path, fsync=True)
    session = Session(key=KEY)
    for n in range(3):
        turn(store_a, session, n)
    other = store_b.load(KEY)
    assert other is not None

    session.messages[:] = session.messages[-2:]
    session.last_consolidated = 0
    session.summary = ArchivedSummary("- earlier chat about tea", session.updated_at)
    store_a.rewrite(session)
    path = file_of(tmp_path)
    kinds = [r.get("_type", "msg") for r in records(path)]
    assert kinds == ["session", "msg", "msg", "meta"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["direct.jsonl"]  # no temp files

    store_b.refresh(other)  # the file was replaced: B reloads it instead of reading garbage
    assert [m["content"] for m in other.messages] == ["question 0002", "answer 0002"]
    assert other.summary == session.summary

    turn(store_b, other, 3)
    store_a.refresh(session)
    assert len(session.messages) == 4


def test_delete_removes_the_files(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key="telegram:5")
    turn(store, session, 1)
    assert store.delete("telegram:5") is True
    assert not (tmp_path / "sessions" / "telegram").exists()
    assert store.load("telegram:5") is None
    assert store.delete("telegram:5") is False


def test_list_shows_previews_counts_and_newest_first(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    old = Session(key="cli:old", created_at="2026-01-01T10:00:00+00:00")
    store.append(old, [old.add({"role": "user", "content": "x" * 300,
                                "timestamp": "2026-01-01T10:00:00+00:00"})])
    new = Session(key="telegram:1")
    store.append(new, [
        new.add({"role": "user", "content": "  what's\n the   weather?\n\n[Runtime]",
                 "_runtime_context": {"version": 1, "suffix": "[Runtime]"}}),
        new.add({"role": "assistant", "content": "sunny"}),
    ])
    (tmp_path / "sessions" / "notes.txt").write_text("not a session")

    infos = store.list()
    assert [i.key for i in infos] == ["telegram:1", "cli:old"]
    first: SessionInfo = infos[0]
    assert first.preview == "what's the weather?"
    assert first.message_count == 2
    assert first.size_bytes == file_of(tmp_path, "telegram:1").stat().st_size
    assert len(infos[1].preview) == 120 and infos[1].preview.endswith("…")


def test_failed_rewrite_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    turn(store, session, 1)
    path = file_of(tmp_path)
    before = path.read_bytes()

    def read_only(fd: int, data: bytes) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    session.messages[:] = session.messages[-1:]
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", read_only)
        with pytest.raises(StorageError, match="Read-only"):
            store.rewrite(session)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["direct.jsonl"]


def test_derived_lock_directory_may_be_deleted_between_turns(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = Session(key=KEY)
    turn(store, session, 1)
    shutil.rmtree(tmp_path / ".hippobot")
    turn(store, session, 2)
    loaded = JsonlSessionStore(tmp_path).load(KEY)
    assert loaded is not None and len(loaded.messages) == 4


def test_a_process_dying_while_it_creates_a_session_leaves_no_headerless_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between creating a new session's file and writing it, a process used to leave
    an empty session file (found by the SIGKILL suite); the file now appears whole or not at
    all, and the next start writes the session as usual."""
    import hippobot.atomic as atomic_module

    real_write_fully = atomic_module._write_fully

    def die(fd: int, data: bytes) -> None:
        raise SystemExit("killed")  # BaseException, like the process ending mid-write

    store = JsonlSessionStore(tmp_path)
    session = Session(KEY)
    monkeypatch.setattr(atomic_module, "_write_fully", die)
    with pytest.raises(SystemExit):
        store.append(session, [session.add({"role": "user", "content": "hello"})])

    path = file_of(tmp_path)
    assert not path.exists()
    assert [p.name for p in path.parent.iterdir()] == []  # no temp file left either

    monkeypatch.setattr(atomic_module, "_write_fully", real_write_fully)
    fresh = JsonlSessionStore(tmp_path)
    again = Session(KEY)
    fresh.append(again, [again.add({"role": "user", "content": "hello"})])
    lines = records(path)
    assert lines[0]["_type"] == "session" and lines[0]["key"] == KEY
    assert [m["content"] for m in fresh.load(KEY).messages] == ["hello"]
