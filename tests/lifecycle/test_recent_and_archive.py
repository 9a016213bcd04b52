"""Recent History spends its share on what matters; processed entries move to a bounded
archive that recall still searches."""

from __future__ import annotations

import random

import pytest

from hippobot.context.recent import RecentEntry, render_entry, select_recent_history
from hippobot.context.tokens import count_text
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore


def entry(cursor: int, content: str, key: str = "cli:direct") -> RecentEntry:
    return RecentEntry(cursor, f"2026-11-{cursor:02d} 10:00", content, key)


def shown(selection) -> str:
    return "\n".join(e.content for e in selection.entries)


def test_durable_lines_outrank_passing_remarks_when_the_share_is_tight():
    entries = [
        entry(i, f"- [ephemeral] the weather on day {i} was grey and windy with light rain\n"
                 f"- [permanent] User's locker {i} code is {1000 + i}")
        for i in range(1, 13)
    ]
    sel = select_recent_history(entries, session_key="cli:direct", include_other_sessions=True, max_tokens=420)
    text = shown(sel)
    assert all(f"code is {1000 + i}" in text for i in range(1, 13)), "a durable line was dropped"
    assert sel.dropped_other > 0 and sel.dropped_durable == 0
    assert "day 12" in text  # the newest entry stays whole


def test_when_even_durable_lines_overflow_the_prompt_says_so():
    entries = [entry(i, f"- [permanent] User's locker {i} code is {1000 + i}") for i in range(1, 40)]
    sel = select_recent_history(entries, session_key="cli:direct", include_other_sessions=True, max_tokens=200)
    assert sel.dropped_durable > 0
    assert "Dream is filing them" in sel.note
    assert "code is 1039" in shown(sel)  # the newest are kept


@pytest.mark.parametrize("cap", [300, 700, 1500])
def test_what_the_selection_keeps_fits_as_the_prompt_renders_it(cap):
    # The prompt drops whole entries, durable facts and all, when the rendered section is
    # over its share; the selection must cost entries the way they are rendered (the
    # timestamp, the indent, fenced look-alikes), or an early fact silently leaves the prompt.
    rng = random.Random(cap)
    words = ["garden", "compost", "tomato", "rain", "# heading", "---", "basil", "soil"]
    entries = []
    for i in range(1, 40):
        lines = [f"- [ephemeral] today (= {i} December 2026) " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 40)))
                 for _ in range(rng.randint(1, 6))]
        lines.insert(rng.randint(0, len(lines)), f"- [permanent] User's locker {i} code is {1000 + i}")
        entries.append(RecentEntry(i, f"2026-12-{1 + i % 28:02d} 07:{i:02d}", "\n".join(lines), "cli:direct"))
    sel = select_recent_history(entries, session_key="cli:direct", include_other_sessions=True, max_tokens=cap)
    note = f"{sel.note}\n\n" if sel.note else ""
    text = "# Recent History\n\n" + note + "\n".join(render_entry(e.timestamp, e.content) for e in sel.entries)
    assert count_text(text) <= cap


def test_a_correction_hides_the_fact_it_replaces():
    entries = [entry(1, "- [permanent] User lives in Tokyo\n- [permanent] User has a cat named Luna"),
               entry(2, "- [correction] User moved to Osaka, not Tokyo")]
    text = shown(select_recent_history(entries, session_key="cli:direct", include_other_sessions=True, max_tokens=8000))
    assert "lives in Tokyo" not in text
    assert "Osaka, not Tokyo" in text and "Luna" in text


def test_other_chats_contribute_durable_lines_only_and_can_be_kept_apart():
    entries = [entry(1, "- [permanent] User is vegetarian\n- [ephemeral] User is on a train", key="telegram:me"),
               entry(2, "[RAW] 4 messages (summary failed: timeout)\n[?] USER: secret plans", key="telegram:me")]
    text = shown(select_recent_history(entries, session_key="cli:direct", include_other_sessions=True, max_tokens=8000))
    assert "vegetarian" in text and "train" not in text and "secret plans" not in text
    apart = select_recent_history(entries, session_key="cli:direct", include_other_sessions=False, max_tokens=8000)
    assert apart.entries == ()


def _store(tmp_path) -> MemoryStore:
    store = MemoryStore(tmp_path)
    for i in range(1, 7):
        store.append_history(f"- [permanent] fact {i}", session_key="cli:direct",
                             source=HistorySource("cli:direct", i, i + 1))
    return store


def test_processed_entries_move_to_the_archive(tmp_path):
    store = _store(tmp_path)
    store.set_dream_cursor(4)
    assert store.archive_processed() == 4
    assert [e.cursor for e in store.read_history()] == [5, 6]
    assert [e.cursor for e in store.read_archive()] == [1, 2, 3, 4]
    assert store.get_entry(2).content == "- [permanent] fact 2"
    new = store.append_history("- [permanent] fact 7", session_key="cli:direct")
    assert new.cursor == 7  # cursors keep increasing
    assert store.archive_processed() == 0  # nothing new was processed


def test_a_crash_between_archive_and_rewrite_duplicates_nothing(tmp_path):
    store = _store(tmp_path)
    store.set_dream_cursor(3)
    # the archive got the lines, then the process died before history.jsonl was rewritten
    lines = store.history_path.read_text().splitlines()[:3]
    store.archive_path.write_text("\n".join(lines) + "\n")
    assert store.archive_processed() == 3
    assert [e.cursor for e in store.read_archive()] == [1, 2, 3]
    assert [e.cursor for e in store.read_history()] == [4, 5, 6]


def test_recall_searches_the_archive(tmp_path):
    from hippobot.recall.index import RecallIndex

    store = _store(tmp_path)
    store.append_history("- [permanent] User has a cat named Luna", session_key="cli:direct")
    store.set_dream_cursor(7)
    store.archive_processed()
    assert store.read_history() == []
    index = RecallIndex(tmp_path)
    hits = index.search("Luna")
    assert hits and "history#7" in index.get("history#7").splitlines()[0]
