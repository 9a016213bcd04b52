"""Finding facts: history, session messages, memory files, Chinese text, hostile queries."""

from __future__ import annotations

import json

import pytest

from hippobot.recall import RecallError, RecallIndex

from .conftest import RUNTIME, Workspace


def _citations(hits) -> list[str]:
    return [h.citation for h in hits]


def test_finds_history_entry_with_cursor_citation(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(41, "- User lives in Lisbon")
    ws.add_history(42, "- User prefers dark mode\n- Decided to use PostgreSQL")

    hits = index.search("PostgreSQL")

    assert _citations(hits) == ["history#42"]
    assert hits[0].kind == "history"
    assert "«PostgreSQL»" in hits[0].snippet
    assert hits[0].timestamp == "2026-04-01 09:00"


def test_finds_consolidated_session_message(ws: Workspace, index: RecallIndex) -> None:
    # Messages before last_consolidated are archived but stay in the file: still searchable.
    ws.add_message("cli:direct", "user", "My sister's name is Margarethe")
    ws.add_message("cli:direct", "assistant", "Noted.")
    ws.add_meta("cli:direct", last_consolidated=2)
    ws.add_message("cli:direct", "user", "What is the weather?")

    hits = index.search("Margarethe")

    assert _citations(hits) == ["session cli:direct#0"]
    assert hits[0].role == "user"
    assert hits[0].session_key == "cli:direct"


def test_message_numbers_count_only_message_lines(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("cli:direct", "user", "first")
    ws.add_meta("cli:direct", last_consolidated=0)
    ws.add_message("cli:direct", "assistant", "second")
    ws.append_line(ws.session_path("cli:direct"), "{not json")
    ws.add_message("cli:direct", "user", "third zebra")

    assert _citations(index.search("zebra")) == ["session cli:direct#2"]


def test_runtime_context_suffix_is_not_indexed(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message(
        "cli:direct",
        "user",
        "book a table" + RUNTIME,
        _runtime_context={"version": 1, "suffix": RUNTIME},
    )

    assert index.search("Runtime Context metadata") == []
    hits = index.search("table")
    assert hits and "Runtime" not in hits[0].snippet


def test_tool_calls_and_results_are_searchable(ws: Workspace, index: RecallIndex) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "exec", "arguments": json.dumps({"command": "du -sh ~/photos"})},
    }
    ws.add_message("cli:direct", "assistant", None, tool_calls=[call])
    ws.add_message("cli:direct", "tool", "42G\t/home/ada/photos", tool_call_id="c1", name="exec")

    hits = index.search("photos")

    assert sorted(_citations(hits)) == ["session cli:direct#0", "session cli:direct#1"]
    call_hit = next(h for h in hits if h.citation.endswith("#0"))
    assert "[tool call] exec" in call_hit.snippet


def test_memory_file_hit_cites_the_matching_line(ws: Workspace, index: RecallIndex) -> None:
    ws.write(
        "memory/MEMORY.md",
        "# Memory\n\n## Preferences\n- Likes dark mode\n- Has a cat named Luna\n\n## Work\n- Uses SQLite\n",
    )
    ws.write("USER.md", "# User\n\nName: Ada Lovelace\n")

    assert _citations(index.search("cat Luna")) == ["memory/MEMORY.md:5"]
    assert _citations(index.search("Lovelace")) == ["USER.md:3"]
    assert _citations(index.search("sqlite", scope="memory")) == ["memory/MEMORY.md:8"]


def test_markdown_anywhere_under_memory_is_indexed(ws: Workspace, index: RecallIndex) -> None:
    ws.write("memory/projects/garden.md", "Tomatoes go in the south bed.\n")

    assert _citations(index.search("tomatoes")) == ["memory/projects/garden.md:1"]


def test_chinese_substring_query(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "- 用户喜欢深色模式")
    ws.add_message("feishu:ou_1", "user", "我的猫叫Luna，它三岁了")

    hits = index.search("深色模式")
    assert _citations(hits) == ["history#1"]
    assert "«深色模式»" in hits[0].snippet
    # Two-character words (the most common length) and single characters work too.
    assert _citations(index.search("深色")) == ["history#1"]
    assert _citations(index.search("猫")) == ["session feishu:ou_1#0"]
    assert _citations(index.search("luna")) == ["session feishu:ou_1#0"]
    assert index.search("浅色模式") == []


def test_japanese_and_accented_text(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "ユーザーは東京に住んでいる")
    ws.add_history(2, "Prefers the café on Rua Augusta")

    assert _citations(index.search("東京")) == ["history#1"]
    assert _citations(index.search("cafe")) == ["history#2"]


def test_words_are_stemmed(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "- The user preferred tea over coffee")

    assert _citations(index.search("preferences")) == ["history#1"]


def test_all_terms_rank_before_some_terms(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "We talked about the garden", timestamp="2026-04-05 09:00")
    ws.add_history(2, "The garden shed needs a new lock", timestamp="2026-01-01 09:00")

    hits = index.search("garden lock")

    assert _citations(hits) == ["history#2", "history#1"]


def test_recent_entries_rank_higher_when_equally_relevant(
    ws: Workspace, index: RecallIndex
) -> None:
    ws.add_history(1, "- Flight to Berlin booked", timestamp="2025-01-10 09:00")
    ws.add_history(2, "- Flight to Berlin booked", timestamp="2026-04-01 09:00")

    hits = index.search("berlin flight")

    assert _citations(hits) == ["history#2", "history#1"]
    assert hits[0].score > hits[1].score


def test_scope_limits_kinds(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "kiwi in history")
    ws.add_message("cli:direct", "user", "kiwi in a session")
    ws.write("memory/MEMORY.md", "- kiwi in memory\n")

    assert {h.kind for h in index.search("kiwi")} == {"history", "session", "memory"}
    assert [h.kind for h in index.search("kiwi", scope="history")] == ["history"]
    assert [h.kind for h in index.search("kiwi", scope="sessions")] == ["session"]
    assert [h.kind for h in index.search("kiwi", scope="memory")] == ["memory"]
    with pytest.raises(RecallError):
        index.search("kiwi", scope="everything")  # type: ignore[arg-type]


def test_k_limits_results(ws: Workspace, index: RecallIndex) -> None:
    for i in range(20):
        ws.add_history(i, f"note {i} about llamas")

    assert len(index.search("llamas", k=3)) == 3
    assert len(index.search("llamas")) == 8


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "*",
        "NEAR(",
        ")(",
        "AND OR",
        "'; DROP TABLE docs; --",
        'a"b',
        "body:llama",
        "^x",
        "-",
        "{owner}: k1",
        "",
        "\x00",
        "NOT",
        "llama*",
        '"llama',
    ],
)
def test_hostile_queries_never_raise(ws: Workspace, index: RecallIndex, query: str) -> None:
    ws.add_history(1, "a llama and an owner walk into a docs table")

    hits = index.search(query)

    assert isinstance(hits, list)
    assert index.search("llama")  # and the index is still intact


def test_operator_words_are_searched_as_words(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "He said NEAR the station, not far")
    ws.add_history(2, "something else")

    assert _citations(index.search("NEAR(")) == ["history#1"]


def test_corrupt_history_lines_are_skipped(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "first mango")
    ws.append_line(ws.history, "this is not json")
    ws.append_line(ws.history, json.dumps({"cursor": "x", "content": "bad cursor mango"}))
    ws.append_line(ws.history, json.dumps([1, 2, 3]))
    ws.add_history(2, "second mango")

    assert sorted(_citations(index.search("mango"))) == ["history#1", "history#2"]


def test_history_without_session_key(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(7, "legacy entry about violins", session_key=None)

    hit = index.search("violins", session_key="cli:direct")[0]

    assert hit.session_key is None and not hit.other_session


def test_only_the_question_of_a_message_is_searched_in_any_script() -> None:
    # Recall searches a message's questions, not how to answer them; a sentence in Chinese
    # ends without a space, a line break ends one too.
    from hippobot.recall.auto import search_text

    assert search_text("我的猫叫什么？回答要短。") == "我的猫叫什么？"
    assert search_text("Where do I work?\nAnswer briefly.") == "Where do I work?"
    assert search_text("I live in Osaka now.") == "I live in Osaka now."
