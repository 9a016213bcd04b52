"""Keeping the index in step with the files: appends, edits, rewrites, deletions, damage."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3

from hippobot.recall import RecallIndex

from .conftest import Workspace


def _citations(hits) -> list[str]:
    return [h.citation for h in hits]


def _doc_count(index: RecallIndex) -> int:
    with sqlite3.connect(index.path) as conn:
        return conn.execute("SELECT count(*) FROM docs").fetchone()[0]


def test_index_lives_under_dot_hippobot(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "anything")
    index.sync()

    assert index.path == ws.root / ".hippobot" / "recall.sqlite3"
    assert index.path.is_file()


def test_nothing_changed_reads_nothing(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "alpha")
    ws.add_message("cli:direct", "user", "beta")
    ws.write("memory/MEMORY.md", "- gamma\n")
    for path in (ws.history, ws.session_path("cli:direct"), ws.root / "memory" / "MEMORY.md"):
        os.utime(path, (1_700_000_000, 1_700_000_000))  # settled, not written this instant
    first = index.sync()
    assert first.files_new == 3 and first.docs_added == 3

    again = index.sync()

    assert again.files_unchanged == 3
    assert (again.docs_added, again.docs_removed, again.bytes_read) == (0, 0, 0)


def test_appended_turn_indexes_only_the_new_lines(ws: Workspace, index: RecallIndex) -> None:
    for i in range(50):
        ws.add_message("cli:direct", "user" if i % 2 == 0 else "assistant", f"old message {i}")
    ws.add_history(1, "old summary")
    index.sync()
    session_size = ws.session_path("cli:direct").stat().st_size

    ws.add_message("cli:direct", "user", "Where did I leave the car?")
    ws.add_message("cli:direct", "assistant", "You parked on level 3")
    stats = index.sync()

    assert stats.files_appended == 1 and stats.files_reindexed == 0
    assert (stats.docs_added, stats.docs_removed) == (2, 0)
    assert stats.bytes_read < 200 < session_size  # the tail, not the file
    assert _citations(index.search("parked")) == ["session cli:direct#51"]
    assert _doc_count(index) == 53


def test_history_append_is_incremental(ws: Workspace, index: RecallIndex) -> None:
    for i in range(10):
        ws.add_history(i, f"entry {i}")
    index.sync()

    ws.add_history(10, "- Adopted a dog called Biscuit")
    stats = index.sync()

    assert (stats.files_appended, stats.docs_added, stats.docs_removed) == (1, 1, 0)
    assert _citations(index.search("biscuit")) == ["history#10"]


def test_torn_last_line_waits_for_its_newline(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "complete entry")
    line = json.dumps({"cursor": 2, "timestamp": "2026-04-02 10:00", "content": "pelican facts"})
    with ws.history.open("a", encoding="utf-8") as fh:
        fh.write(line[:20])  # a writer is mid-way through this line
    index.sync()
    assert index.search("pelican") == []

    with ws.history.open("a", encoding="utf-8") as fh:
        fh.write(line[20:] + "\n")
    stats = index.sync()

    assert stats.files_appended == 1 and stats.docs_added == 1
    assert _citations(index.search("pelican")) == ["history#2"]


def test_hand_edited_memory_drops_removed_fact(ws: Workspace, index: RecallIndex) -> None:
    ws.write("memory/MEMORY.md", "# Memory\n\n- Allergic to peanuts\n- Likes jazz\n")
    assert _citations(index.search("peanuts")) == ["memory/MEMORY.md:3"]

    ws.write("memory/MEMORY.md", "# Memory\n\n- Likes jazz\n")
    stats = index.sync()

    assert stats.files_reindexed == 1
    assert index.search("peanuts") == []
    assert _citations(index.search("jazz")) == ["memory/MEMORY.md:3"]


def test_same_size_memory_edit_right_after_indexing(ws: Workspace, index: RecallIndex) -> None:
    # Same length, same clock tick: size and mtime alone cannot tell these apart.
    path = ws.write("memory/MEMORY.md", "- Has two cats\n")
    assert _citations(index.search("cats")) == ["memory/MEMORY.md:1"]
    stat = path.stat()

    path.write_text("- Has two dogs\n", encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    assert index.search("cats") == []
    assert _citations(index.search("dogs")) == ["memory/MEMORY.md:1"]


def test_rewritten_shorter_session_is_reindexed(ws: Workspace, index: RecallIndex) -> None:
    for i in range(30):
        ws.add_message("cli:direct", "user", f"filler {i} about rhubarb")
    ws.add_message("cli:direct", "user", "keep the marmalade recipe")
    index.sync()

    # Idle compaction: the file is rewritten (temp file + rename) to a recent suffix.
    path = ws.session_path("cli:direct")
    tmp = path.with_name(".compact.tmp")
    header, *messages = path.read_text(encoding="utf-8").splitlines()
    tmp.write_text("\n".join([header, *messages[-1:]]) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    stats = index.sync()

    assert stats.files_reindexed == 1
    assert stats.docs_removed == 31 and stats.docs_added == 1
    assert index.search("rhubarb") == []
    assert _citations(index.search("marmalade")) == ["session cli:direct#0"]


def test_edit_in_place_that_grows_the_file_is_detected(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("cli:direct", "user", "the code word is walrus")
    index.sync()

    path = ws.session_path("cli:direct")
    path.write_text(
        path.read_text(encoding="utf-8").replace("walrus", "narwhal-and-more"), encoding="utf-8"
    )
    stats = index.sync()

    assert stats.files_reindexed == 1
    assert index.search("walrus") == []
    assert _citations(index.search("narwhal")) == ["session cli:direct#0"]


def test_deleted_session_file_is_forgotten(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("telegram:1", "user", "secret aardvark plan")
    index.sync()

    ws.session_path("telegram:1").unlink()
    stats = index.sync()

    assert stats.files_removed == 1 and stats.docs_removed == 1
    assert index.search("aardvark") == []


def test_session_key_comes_from_header_not_path(ws: Workspace, index: RecallIndex) -> None:
    path = ws.root / "sessions" / "weird%3Aname" / "x.jsonl"
    path.parent.mkdir(parents=True)
    header = {"_type": "session", "format": 1, "key": "slack:team:C42", "created_at": "2026-04-01"}
    msg = {"role": "user", "content": "quokka sighting", "timestamp": "2026-04-01T10:00:00"}
    path.write_text(json.dumps(header) + "\n" + json.dumps(msg) + "\n", encoding="utf-8")

    assert _citations(index.search("quokka")) == ["session slack:team:C42#0"]


def test_deleting_the_index_directory_loses_nothing(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "- Passport expires in 2031")
    ws.add_message("cli:direct", "user", "remind me about the passport")
    assert len(index.search("passport")) == 2

    shutil.rmtree(ws.root / ".hippobot")

    assert len(index.search("passport")) == 2  # same object notices and rebuilds
    fresh = RecallIndex(ws.root)
    try:
        assert len(fresh.search("passport")) == 2
    finally:
        fresh.close()


def test_corrupt_index_is_rebuilt_with_a_warning(ws: Workspace, caplog) -> None:
    ws.add_history(1, "- Favourite colour is teal")
    first = RecallIndex(ws.root)
    first.sync()
    first.close()
    for suffix in ("-wal", "-shm"):
        (ws.root / ".hippobot" / f"recall.sqlite3{suffix}").unlink(missing_ok=True)
    (ws.root / ".hippobot" / "recall.sqlite3").write_bytes(b"this is not a database" * 500)

    index = RecallIndex(ws.root)
    try:
        with caplog.at_level(logging.WARNING, logger="hippobot.recall"):
            hits = index.search("teal")
        assert _citations(hits) == ["history#1"]
        assert any("corrupt" in r.getMessage() for r in caplog.records)
    finally:
        index.close()


def test_corruption_warning_reaches_sync_stats(ws: Workspace) -> None:
    ws.add_history(1, "x")
    (ws.root / ".hippobot").mkdir()
    (ws.root / ".hippobot" / "recall.sqlite3").write_bytes(b"\x00garbage" * 1000)

    index = RecallIndex(ws.root)
    try:
        stats = index.sync()
    finally:
        index.close()
    assert any("corrupt" in w for w in stats.warnings)


def test_rebuild_reindexes_everything(ws: Workspace, index: RecallIndex) -> None:
    for i in range(5):
        ws.add_history(i, f"entry {i} ocelot")
    ws.add_message("cli:direct", "user", "ocelot chat")
    index.sync()

    stats = index.rebuild()

    assert stats.rebuilt and stats.docs_added == 6 and stats.files_new == 2
    assert len(index.search("ocelot")) == 6
    assert _doc_count(index) == 6


def test_two_indexes_on_one_workspace_do_not_duplicate(ws: Workspace) -> None:
    ws.add_message("cli:direct", "user", "first heron")
    a, b = RecallIndex(ws.root), RecallIndex(ws.root)
    try:
        a.sync()
        ws.add_message("cli:direct", "user", "second heron")
        first, second = a.sync(), b.sync()

        assert first.docs_added + second.docs_added == 1
        assert _citations(b.search("heron")) == ["session cli:direct#1", "session cli:direct#0"]
        assert _doc_count(a) == 2
    finally:
        a.close()
        b.close()


def test_schema_change_triggers_rebuild(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "lemur")
    index.sync()
    index.close()
    with sqlite3.connect(ws.root / ".hippobot" / "recall.sqlite3") as conn:
        conn.execute("UPDATE meta SET value='0' WHERE key='schema'")

    again = RecallIndex(ws.root)
    try:
        assert _citations(again.search("lemur")) == ["history#1"]
    finally:
        again.close()


def test_sync_given_paths_checks_only_those(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("cli:direct", "user", "one")
    ws.add_message("telegram:7", "user", "two")
    index.sync()
    ws.add_message("cli:direct", "user", "toucan")
    ws.add_message("telegram:7", "user", "flamingo")

    stats = index.sync(paths=[ws.session_path("cli:direct"), ws.root / "AGENTS.md"])

    assert (stats.files_seen, stats.files_appended, stats.docs_added) == (1, 1, 1)
    index.auto_sync = False
    assert [h.citation for h in index.search("toucan")] == ["session cli:direct#1"]
    assert index.search("flamingo") == []
    assert index.sync().docs_added == 1  # the full sync picks up the rest


def test_sync_given_a_deleted_path_drops_it(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("cli:direct", "user", "armadillo")
    index.sync()
    ws.session_path("cli:direct").unlink()

    stats = index.sync(paths=[ws.session_path("cli:direct")])

    assert stats.files_removed == 1
    assert index.search("armadillo") == []


def test_search_answers_while_another_process_holds_the_write_lock(ws: Workspace) -> None:
    ws.add_history(1, "- Prefers window seats")
    index = RecallIndex(ws.root)
    index.sync()
    ws.add_history(2, "- Prefers aisle seats on long flights")
    blocker = sqlite3.connect(index.path, timeout=0)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        conn = index._conn
        assert conn is not None
        conn.execute("PRAGMA busy_timeout=50")

        hits = index.search("window seats")

        assert [h.citation for h in hits] == ["history#1"]  # stale but answered
    finally:
        blocker.rollback()
        blocker.close()
        index.close()
