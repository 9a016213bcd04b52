"""MemoryStore: the memory files as a user (and a second process) sees them on disk."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pytest

from hippobot.errors import StorageError
from hippobot.memory import HistorySource, MemoryStore, atomic_write_text, parse_line
from hippobot.memory.store import TRUNCATION_SUFFIX
from hippobot.redact import REDACTED, Redactor

FIXTURES = Path(__file__).parent / "fixtures"
FIXED = datetime(2026, 4, 3, 0, 2)


def make_store(workspace: Path, **kwargs) -> MemoryStore:
    return MemoryStore(workspace, clock=lambda: FIXED, **kwargs)


def history_lines(workspace: Path) -> list[str]:
    return (workspace / "memory" / "history.jsonl").read_text(encoding="utf-8").splitlines()


def leftover_temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob("*.tmp")]


# --- durable Markdown files -------------------------------------------------------------------


def test_missing_files_read_as_empty(tmp_path):
    store = make_store(tmp_path)
    assert (store.read_memory(), store.read_soul(), store.read_user()) == ("", "", "")
    assert store.read_history() == []
    assert store.last_cursor() == 0
    assert store.dream_cursor() == 0
    assert store.pending_count() == 0
    assert not (tmp_path / "memory").exists()  # reading creates nothing


def test_writes_land_where_a_user_looks_and_round_trip(tmp_path):
    store = make_store(tmp_path)
    store.write_memory("# Long-term Memory\n\n- Cat named Luna\n")
    store.write_soul("# Soul\n")
    store.write_user("# User\n- 名前: Mara\n")
    assert (tmp_path / "memory" / "MEMORY.md").read_text() == "# Long-term Memory\n\n- Cat named Luna\n"
    assert (tmp_path / "SOUL.md").read_text() == "# Soul\n"
    assert (tmp_path / "USER.md").read_text(encoding="utf-8") == "# User\n- 名前: Mara\n"
    assert store.read_user() == "# User\n- 名前: Mara\n"
    assert leftover_temp_files(tmp_path) == []


def test_invalid_utf8_is_replaced_not_fatal(tmp_path):
    (tmp_path / "SOUL.md").write_bytes(b"# Soul\n\xff\xfe broken\n")
    assert make_store(tmp_path).read_soul() == "# Soul\n\ufffd\ufffd broken\n"


def test_failed_replace_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    store = make_store(tmp_path)
    store.write_memory("old facts\n")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StorageError, match=r"MEMORY\.md"):
        store.write_memory("new facts\n")
    assert store.read_memory() == "old facts\n"
    assert leftover_temp_files(tmp_path) == []
    assert sorted(p.name for p in (tmp_path / "memory").iterdir()) == ["MEMORY.md"]


def test_atomic_write_keeps_file_mode(tmp_path):
    target = tmp_path / "notes.md"
    target.write_text("a")
    target.chmod(0o640)
    atomic_write_text(target, "b")
    assert target.read_text() == "b"
    assert target.stat().st_mode & 0o777 == 0o640


# --- appending: exact format and cursors ---------------------------------------------------


def test_append_writes_the_spec_line_and_cursor(tmp_path):
    store = make_store(tmp_path)
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / ".cursor").write_text("41")
    entry = store.append_history(
        "- User prefers dark mode\n- Decided to use PostgreSQL\n\n", session_key="cli:direct"
    )
    assert entry.cursor == 42
    assert history_lines(tmp_path) == [
        '{"cursor": 42, "timestamp": "2026-04-03 00:02", "content": '
        '"- User prefers dark mode\\n- Decided to use PostgreSQL", "session_key": "cli:direct"}'
    ]
    assert (tmp_path / "memory" / ".cursor").read_text() == "42"


def test_append_with_source_and_without_session(tmp_path):
    store = make_store(tmp_path)
    store.append_history(
        "- fact", session_key="cli:direct", source=HistorySource("cli:direct", 12, 40)
    )
    store.append_history("- 没有会话的条目", session_key=None)
    assert history_lines(tmp_path) == [
        '{"cursor": 1, "timestamp": "2026-04-03 00:02", "content": "- fact", "session_key": '
        '"cli:direct", "source": {"session": "cli:direct", "from": 12, "to": 40}}',
        '{"cursor": 2, "timestamp": "2026-04-03 00:02", "content": "- 没有会话的条目"}',
    ]


def test_cursors_strictly_increase_and_match_the_file(tmp_path):
    store = make_store(tmp_path)
    returned = [store.append_history(f"- fact {i}", session_key="cli:direct").cursor for i in range(20)]
    on_disk = [json.loads(line)["cursor"] for line in history_lines(tmp_path)]
    assert returned == on_disk == list(range(1, 21))
    assert store.last_cursor() == 20
    # A fresh process sees the same state.
    assert make_store(tmp_path).append_history("- next", session_key=None).cursor == 21


def test_append_cleans_reasoning_and_trailing_space(tmp_path):
    store = make_store(tmp_path)
    assert store.append_history("<think>hmm</think>\n- fact  \n\n", session_key=None).content == "- fact"
    assert store.append_history("<think>only thoughts</think>", session_key=None).content == ""
    assert [json.loads(line)["content"] for line in history_lines(tmp_path)] == ["- fact", ""]


def test_oversize_entries_are_cut_with_one_warning(tmp_path, caplog):
    store = make_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hippobot.memory.store"):
        first = store.append_history("x" * 70_000, session_key=None)
        second = store.append_history("y" * 70_000, session_key=None)
        small = store.append_history("z" * 900, session_key=None, max_chars=1000)
        custom = store.append_history("w" * 2000, session_key=None, max_chars=1000)
    assert len(first.content) == 64_000 and first.content.endswith(TRUNCATION_SUFFIX)
    assert second.content.endswith(TRUNCATION_SUFFIX)
    assert small.content == "z" * 900
    assert len(custom.content) == 1000 and custom.content.endswith(TRUNCATION_SUFFIX)
    assert len([r for r in caplog.records if "cut to" in r.message]) == 1
    assert json.loads(history_lines(tmp_path)[0])["content"] == first.content


def test_secrets_never_reach_the_archive(tmp_path):
    store = make_store(tmp_path, redactor=Redactor(["my-local-proxy-key-42"]))
    store.append_history(
        "[RAW] 2 messages\n[2026-04-03T00:01] USER: my key is sk-proj-Ab3dEfGhIjKlMnOpQrStUv0123456789\n"
        "[2026-04-03T00:01] TOOL: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload123.sig\n"
        "proxy key my-local-proxy-key-42",
        session_key="cli:direct",
    )
    raw = (tmp_path / "memory" / "history.jsonl").read_text()
    assert "sk-proj-" not in raw and "eyJhbGci" not in raw and "my-local-proxy-key-42" not in raw
    content = json.loads(raw)["content"]
    assert content.count(REDACTED) == 3
    assert content.startswith("[RAW] 2 messages\n")


def test_new_entries_are_never_hidden_behind_the_dream_cursor(tmp_path):
    # history.jsonl and .cursor deleted by hand, .dream_cursor left at 50.
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / ".dream_cursor").write_text("50")
    store = make_store(tmp_path)
    assert store.append_history("- fresh", session_key=None).cursor == 51
    assert store.pending_count() == 1


# --- damaged cursor files -------------------------------------------------------------------


def test_garbage_cursor_is_rebuilt_from_the_file(tmp_path, caplog):
    store = make_store(tmp_path)
    for i in range(5):
        store.append_history(f"- {i}", session_key=None)
    (tmp_path / "memory" / ".cursor").write_text("12x\n")
    fresh = make_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hippobot.memory.store"):
        assert fresh.last_cursor() == 5
    assert any(".cursor" in r.message and "rebuilt" in r.message for r in caplog.records)
    assert (tmp_path / "memory" / ".cursor").read_text() == "5"
    (tmp_path / "memory" / ".cursor").write_text("")  # torn by an old non-atomic writer
    assert make_store(tmp_path).append_history("- 6", session_key=None).cursor == 6


def test_cursor_behind_the_file_does_not_reuse_cursors(tmp_path):
    store = make_store(tmp_path)
    for i in range(3):
        store.append_history(f"- {i}", session_key=None)
    (tmp_path / "memory" / ".cursor").write_text("1")  # crash between line and counter
    assert make_store(tmp_path).append_history("- next", session_key=None).cursor == 4


def test_garbage_dream_cursor_means_everything_pending(tmp_path, caplog):
    store = make_store(tmp_path)
    for i in range(3):
        store.append_history(f"- {i}", session_key=None)
    store.set_dream_cursor(2)
    assert store.pending_count() == 1
    (tmp_path / "memory" / ".dream_cursor").write_text("two")
    with caplog.at_level(logging.WARNING, logger="hippobot.memory.store"):
        assert store.dream_cursor() == 0
    assert any("reset it to 0" in r.message for r in caplog.records)
    assert (tmp_path / "memory" / ".dream_cursor").read_text() == "0"
    assert store.pending_count() == 3


def test_set_dream_cursor_persists_and_validates(tmp_path):
    store = make_store(tmp_path)
    store.set_dream_cursor(17)
    assert (tmp_path / "memory" / ".dream_cursor").read_text() == "17"
    assert make_store(tmp_path).dream_cursor() == 17
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(ValueError):
            store.set_dream_cursor(bad)
    assert store.dream_cursor() == 17


# --- damaged history.jsonl ----------------------------------------------------------------


def test_corrupt_middle_and_torn_last_line(tmp_path, caplog):
    memory = tmp_path / "memory"
    memory.mkdir()
    good = [
        '{"cursor": 1, "timestamp": "2026-04-01 10:00", "content": "- one"}',
        "{this is not json",
        "null",
        '{"cursor": 3, "timestamp": "2026-04-01 11:00", "content": "- three"}',
    ]
    torn = '{"cursor": 4, "timestamp": "2026-04-01 12:00", "content": "- fo'
    (memory / "history.jsonl").write_text("\n".join([*good, torn]))
    (memory / ".cursor").write_text("3")
    store = make_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hippobot.memory.store"):
        entries = store.read_history()
    assert [e.content for e in entries] == ["- one", "- three"]
    assert any("invalid line" in r.message for r in caplog.records)
    assert any("incomplete line" in r.message for r in caplog.records)

    entry = store.append_history("- after the crash", session_key="cli:direct")
    assert entry.cursor == 4
    lines = history_lines(tmp_path)
    assert lines[-2] == torn  # kept for a human to inspect, on its own line
    assert parse_line(lines[-1]) == entry
    assert [e.cursor for e in make_store(tmp_path).read_history()] == [1, 3, 4]
    assert [e.cursor for e in store.read_history()] == [1, 3, 4]


def test_non_object_lines_never_crash_reads_or_appends(tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "history.jsonl").write_text('null\n[1]\ntrue\n"x"\n{"no": "cursor"}\n')
    store = make_store(tmp_path)
    assert store.read_history() == []
    assert store.last_cursor() == 0
    assert store.append_history("- ok", session_key=None).cursor == 1


def test_tail_search_skips_invalid_last_lines(tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "history.jsonl").write_text(
        '{"cursor": 9, "timestamp": "t", "content": "c"}\n{"content": "no cursor"}\n{"cursor": 10, "tim'
    )
    store = make_store(tmp_path)
    assert store.last_cursor() == 9
    assert store.append_history("- x", session_key=None).cursor == 10


# --- fast paths -----------------------------------------------------------------------------


def test_long_cjk_entries_use_the_tail_reader(tmp_path):
    writer = make_store(tmp_path)
    long_text = "用户在讨论数据库迁移方案。" * 800  # ~31 KB of 3-byte characters
    for _ in range(4):
        writer.append_history(long_text, session_key="cli:direct")
    reader = make_store(tmp_path)  # another process: no cache yet
    assert reader.last_cursor() == 4
    assert (reader.stats.tail_reads, reader.stats.full_reads) == (1, 0)
    # Two processes taking turns: each append re-reads only the other's tail.
    for i in range(3):
        writer.append_history(long_text + str(i), session_key=None)
        reader.append_history("短" * 2000, session_key=None)
    assert writer.stats.full_reads == 0 and reader.stats.full_reads == 0
    assert (writer.stats.tail_reads, reader.stats.tail_reads) == (2, 4)
    assert [e.cursor for e in reader.read_history()] == list(range(1, 11))


def test_tail_reader_handles_a_block_boundary_inside_a_character(tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    for pad in range(3):  # shift the multibyte text against the 4 KiB block edges
        line = json.dumps(
            {"cursor": 7 + pad, "timestamp": "t", "content": "é" * pad + "漢" * 5000},
            ensure_ascii=False,
        )
        (memory / "history.jsonl").write_text("x\n" + line + "\n", encoding="utf-8")
        store = make_store(tmp_path)
        assert store.last_cursor() == 7 + pad
        assert store.stats.full_reads == 0


def test_read_history_parses_only_what_was_appended(tmp_path):
    reader = make_store(tmp_path)
    writer = make_store(tmp_path)
    for i in range(5):
        writer.append_history(f"- {i}", session_key="cli:direct")
    assert len(reader.read_history()) == 5
    assert reader.stats.full_reads == 1
    writer.append_history("- 5", session_key="cli:direct")
    assert len(reader.read_history()) == 6
    assert len(reader.read_history()) == 6
    assert (reader.stats.full_reads, reader.stats.incremental_reads) == (1, 1)


def test_read_history_notices_a_rewritten_file(tmp_path):
    reader = make_store(tmp_path)
    writer = make_store(tmp_path)
    for i in range(6):
        writer.append_history(f"- {i}", session_key=None)
    assert len(reader.read_history()) == 6
    writer.set_dream_cursor(6)
    writer.compact_history(keep=2)
    assert [e.cursor for e in reader.read_history()] == [5, 6]
    # Rewritten by hand, same inode, larger than before.
    path = tmp_path / "memory" / "history.jsonl"
    with open(path, "r+", encoding="utf-8") as fh:
        fh.write('{"cursor": 100, "timestamp": "t", "content": "' + "edited " * 20 + '"}\n')
    assert [e.cursor for e in reader.read_history()] == [100]


# --- filters -------------------------------------------------------------------------------


def test_read_history_filters(tmp_path):
    store = make_store(tmp_path)
    for i in range(6):
        store.append_history(f"- {i}", session_key="cli:direct" if i % 2 else "telegram:1")
    assert [e.cursor for e in store.read_history(after=4)] == [5, 6]
    assert [e.cursor for e in store.read_history(session_key="cli:direct")] == [2, 4, 6]
    assert [e.cursor for e in store.read_history(session_key="cli:direct", limit=2)] == [4, 6]
    assert [e.cursor for e in store.read_history(after=1, limit=1)] == [6]
    assert store.read_history(limit=0) == []


# --- compaction ----------------------------------------------------------------------------


def test_compaction_drops_only_processed_entries(tmp_path):
    store = make_store(tmp_path)
    for i in range(10):
        store.append_history(f"- {i}", session_key=None)
    store.set_dream_cursor(4)
    assert store.compact_history(keep=3) == 4  # 5..10 are pending: all kept
    assert [json.loads(line)["cursor"] for line in history_lines(tmp_path)] == list(range(5, 11))
    store.set_dream_cursor(10)
    assert store.compact_history(keep=3) == 3
    assert [e.cursor for e in store.read_history()] == [8, 9, 10]
    assert store.compact_history(keep=3) == 0
    # Cursors keep going up after old lines are gone.
    assert store.append_history("- next", session_key=None).cursor == 11
    assert leftover_temp_files(tmp_path) == []
    assert store.compact_history(keep=0) == 3  # 11 is still pending
    assert [e.cursor for e in store.read_history()] == [11]
    store.set_dream_cursor(11)
    assert store.compact_history(keep=0) == 1
    assert history_lines(tmp_path) == []
    assert store.append_history("- after empty", session_key=None).cursor == 12


# --- two processes -------------------------------------------------------------------------


def _append_many(workspace: str, tag: str, count: int) -> None:
    store = MemoryStore(Path(workspace))
    for i in range(count):
        store.append_history(f"- {tag} {i} " + "数据" * (i * 40), session_key=f"proc:{tag}")


def test_two_processes_never_share_a_cursor(tmp_path):
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_append_many, args=(str(tmp_path), tag, 50)) for tag in ("a", "b")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    lines = history_lines(tmp_path)
    entries = [parse_line(line) for line in lines]
    assert all(entries) and len(entries) == 100
    cursors = [e.cursor for e in entries]
    assert sorted(cursors) == list(range(1, 101)) and cursors == sorted(cursors)
    assert (tmp_path / "memory" / ".cursor").read_text() == "100"
    for tag in ("a", "b"):
        mine = [e.content.split(" ")[2] for e in entries if e.session_key == f"proc:{tag}"]
        assert mine == [str(i) for i in range(50)]


def test_threads_and_two_stores_in_one_process_share_cursors_safely(tmp_path):
    stores = [make_store(tmp_path), make_store(tmp_path)]

    def work(n: int) -> list[int]:
        store = stores[n % 2]
        return [store.append_history(f"- t{n} {i}", session_key=None).cursor for i in range(25)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    allocated = sorted(c for cursors in results for c in cursors)
    assert allocated == list(range(1, 101))
    assert [e.cursor for e in make_store(tmp_path).read_history()] == list(range(1, 101))
    assert stores[0].get_entry(37) == stores[1].get_entry(37) is not None
    assert stores[0].get_entry(1000) is None


# --- nanobot workspaces --------------------------------------------------------------------


@pytest.fixture
def nanobot_workspace(tmp_path) -> Path:
    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURES / "nanobot_workspace", workspace)
    return workspace


def test_nanobot_files_load_as_they_are(nanobot_workspace):
    before = {p: p.read_bytes() for p in nanobot_workspace.rglob("*") if p.is_file()}
    store = make_store(nanobot_workspace)
    entries = store.read_history()
    assert [e.cursor for e in entries] == list(range(114, 121))
    assert entries[0].session_key is None
    assert store.last_cursor() == 120
    assert store.dream_cursor() == 117
    assert store.pending_count() == 3
    assert [e.cursor for e in store.read_history(after=117, session_key="cli:direct")] == [120]
    assert store.read_history(after=117)[1].is_raw
    assert store.read_memory().startswith("# Long-term Memory")
    assert "Mara" in store.read_user()
    # Loading changed nothing on disk.
    assert {p: p.read_bytes() for p in before} == before
    assert store.append_history("- new", session_key="cli:direct").cursor == 121


# --- legacy HISTORY.md ---------------------------------------------------------------------


def _legacy_workspace(tmp_path: Path, content: bytes) -> Path:
    memory = tmp_path / "memory"
    memory.mkdir(parents=True)
    (memory / "HISTORY.md").write_bytes(content)
    mtime = datetime(2026, 2, 1, 12, 0).timestamp()
    os.utime(memory / "HISTORY.md", (mtime, mtime))
    return memory


def test_legacy_history_is_migrated_once_and_kept(tmp_path):
    original = (FIXTURES / "legacy_HISTORY.md").read_bytes()
    memory = _legacy_workspace(tmp_path, original)
    store = make_store(tmp_path)
    entries = store.read_history()
    assert [(e.cursor, e.timestamp) for e in entries] == [
        (1, "2026-01-10 09:15"),
        (2, "2026-01-11 14:02"),
        (3, "2026-01-11 18:40"),
        (4, "2026-01-12 10:00"),
        (5, "2026-01-12 10:30"),
        (6, "2026-02-01 12:00"),
        (7, "2026-02-01 12:00"),
    ]
    assert entries[3].is_raw and entries[3].content.count("\n") == 3
    assert entries[4].content == "Cleaned old snapshots; disk at 60%."
    assert entries[5].content == "[2026-01-13] Week plan: finish the migration."
    assert entries[6].content.startswith("Notes written before")
    assert (memory / ".cursor").read_text() == "7"
    assert (memory / ".dream_cursor").read_text() == "7"
    assert store.pending_count() == 0  # the old archive counts as processed
    assert not (memory / "HISTORY.md").exists()
    assert (memory / "HISTORY.md.bak").read_bytes() == original
    assert all(parse_line(line) for line in history_lines(tmp_path))
    assert make_store(tmp_path).append_history("- new", session_key=None).cursor == 8


def test_legacy_migration_skipped_when_history_has_content(tmp_path):
    memory = _legacy_workspace(tmp_path, b"[2026-01-10 09:15] Old.\n")
    line = '{"cursor": 3, "timestamp": "t", "content": "c"}\n'
    (memory / "history.jsonl").write_text(line)
    make_store(tmp_path)
    assert (memory / "HISTORY.md").exists()
    assert (memory / "history.jsonl").read_text() == line


def test_legacy_migration_runs_when_history_is_empty_and_picks_a_free_backup(tmp_path):
    memory = _legacy_workspace(tmp_path, b"[2026-01-10 09:15] Old \xff\xfe bytes.\n")
    (memory / "history.jsonl").write_text("\n")
    (memory / "HISTORY.md.bak").write_text("from an earlier migration")
    store = make_store(tmp_path)
    assert [e.content for e in store.read_history()] == ["Old \ufffd\ufffd bytes."]
    assert (memory / "HISTORY.md.bak").read_text() == "from an earlier migration"
    assert (memory / "HISTORY.md.bak.2").read_bytes().startswith(b"[2026-01-10 09:15] Old")
