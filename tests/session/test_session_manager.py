"""SessionManager: one object per key, turn locks, all-or-nothing appends."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
from pathlib import Path

import pytest

from hippobot.errors import StorageError, UserError
from hippobot.session import InMemorySessionStore, JsonlSessionStore, SessionManager

KEY = "cli:direct"


async def test_one_object_per_key_and_no_file_until_first_append(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    manager = SessionManager(store)
    session = manager.get(KEY)
    assert manager.get(KEY) is session
    assert await manager.aget(KEY) is session
    assert not store.path_for(KEY).exists()

    stored = await manager.append(session, {"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": "hello"})
    assert [m["content"] for m in stored] == ["hi", "hello"]
    assert session.messages == stored
    other = SessionManager(JsonlSessionStore(tmp_path)).get(KEY)
    assert other.messages == stored


def test_invalid_keys_are_refused() -> None:
    manager = SessionManager(InMemorySessionStore())
    with pytest.raises(UserError):
        manager.get("")


def test_evicted_sessions_keep_identity_while_referenced() -> None:
    manager = SessionManager(InMemorySessionStore(), cache_size=2)
    first = manager.get("cli:1")
    manager.get("cli:2")
    manager.get("cli:3")  # "cli:1" leaves the strong cache
    assert manager.get("cli:1") is first


async def test_turn_lock_is_shared_per_key_and_collected_when_idle() -> None:
    manager = SessionManager(InMemorySessionStore())
    lock = manager.lock(KEY)
    assert manager.lock(KEY) is lock
    assert manager.lock("cli:other") is not lock

    await lock.acquire()
    waiter = asyncio.create_task(manager.lock(KEY).acquire())
    await asyncio.sleep(0)
    del lock
    gc.collect()
    same = manager.lock(KEY)  # the holder/waiter keeps the lock alive
    assert same.locked()
    same.release()
    await waiter
    same.release()
    del same, waiter
    gc.collect()
    assert KEY not in manager._locks  # idle locks do not pile up


async def test_failed_append_leaves_session_and_file_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    manager = SessionManager(store)
    session = manager.get(KEY)
    await manager.append(session, {"role": "user", "content": "kept"})
    before_file = store.path_for(KEY).read_bytes()
    before_updated = session.updated_at

    def disk_full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", disk_full)
        with pytest.raises(StorageError):
            await manager.append(session, {"role": "user", "content": "lost"})
    assert [m["content"] for m in session.messages] == ["kept"]
    assert session.updated_at == before_updated
    assert store.path_for(KEY).read_bytes() == before_file


async def test_cancelled_append_still_matches_the_disk(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    manager = SessionManager(store)
    session = manager.get(KEY)
    task = asyncio.create_task(manager.append(session, {"role": "user", "content": "hi"}))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    on_disk = JsonlSessionStore(tmp_path).load(KEY)
    assert [m["content"] for m in session.messages] == (
        [m["content"] for m in on_disk.messages] if on_disk else []
    )


async def test_meta_rewrite_refresh_delete_through_the_manager(tmp_path: Path) -> None:
    manager = SessionManager(JsonlSessionStore(tmp_path))
    other = SessionManager(JsonlSessionStore(tmp_path))
    session = manager.get(KEY)
    await manager.append(session, {"role": "user", "content": "u1"},
                         {"role": "assistant", "content": "a1"})
    session.last_consolidated = 2
    await manager.save_meta(session)

    mirror = other.get(KEY)
    assert mirror.last_consolidated == 2
    await other.append(mirror, {"role": "user", "content": "u2"})
    assert await manager.refresh(session) == 1

    session.messages[:] = session.messages[-1:]
    session.last_consolidated = 0
    await manager.rewrite(session)
    assert [m["content"] for m in other.store.load(KEY).messages] == ["u2"]

    assert [i.key for i in manager.list()] == [KEY]
    assert await manager.delete(KEY) is True
    assert manager.get(KEY) is not session
    assert manager.get(KEY).messages == []


async def test_in_memory_store_follows_the_same_protocol() -> None:
    store = InMemorySessionStore()
    manager = SessionManager(store)
    session = manager.get(KEY)
    await manager.append(session, {"role": "user", "content": "u1"})
    session.last_consolidated = 1
    await manager.save_meta(session)
    loaded = store.load(KEY)
    assert loaded is not None and loaded is not session
    assert loaded.messages == session.messages and loaded.last_consolidated == 1
    loaded.add({"role": "assistant", "content": "a1"})
    store.append(loaded, loaded.messages[-1:])
    assert await manager.refresh(session) == 1
    assert [i.message_count for i in store.list()] == [2]
    assert store.delete(KEY) and store.load(KEY) is None
