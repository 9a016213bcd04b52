"""Expanding citations, privacy between chats, and the model-facing tools."""

from __future__ import annotations

import json

import pytest

from hippobot.errors import ToolError
from hippobot.recall import RecallError, RecallIndex, format_hits, hits_to_json, recall_tools
from hippobot.tools.base import ToolRegistry

from .conftest import Workspace


@pytest.fixture
def two_chats(ws: Workspace) -> Workspace:
    ws.add_history(
        1,
        "- User is planning a trip to Kyoto in May",
        session_key="cli:direct",
        source={"session": "cli:direct", "from": 0, "to": 3},
    )
    ws.add_history(2, "- Discussed the Kyoto budget with a friend", session_key="telegram:99")
    ws.add_history(3, "- Kyoto temples list (legacy entry)", session_key=None)
    for i, text in enumerate(["hello", "book a ryokan in Kyoto", "done", "thanks", "bye"]):
        ws.add_message("cli:direct", "user" if i % 2 == 0 else "assistant", text)
    ws.add_message("telegram:99", "user", "my Kyoto budget is 2000 euros")
    ws.write("memory/MEMORY.md", "# Memory\n\n- Loves Kyoto\n- Vegetarian\n- Runs on Sundays\n")
    return ws


def _tool(tools, name):
    return next(t for t in tools if t.name == name)


def test_other_sessions_are_marked(two_chats: Workspace, index: RecallIndex) -> None:
    hits = index.search("kyoto", k=10, session_key="cli:direct")

    marked = {h.citation: h.other_session for h in hits}
    assert marked["session telegram:99#0"] is True
    assert marked["history#2"] is True
    assert marked["session cli:direct#1"] is False
    assert marked["history#1"] is False
    assert marked["history#3"] is False  # no session recorded: shared, not foreign
    assert marked["memory/MEMORY.md:3"] is False
    assert "[other session telegram:99]" in format_hits(hits)


def test_private_session_does_not_see_other_chats(two_chats: Workspace, index: RecallIndex) -> None:
    hits = index.search("kyoto", k=10, session_key="cli:direct", include_other_sessions=False)

    citations = {h.citation for h in hits}
    assert citations == {"session cli:direct#1", "history#1", "history#3", "memory/MEMORY.md:3"}
    with pytest.raises(RecallError):
        index.get("session telegram:99#0", session_key="cli:direct", include_other_sessions=False)
    with pytest.raises(RecallError):
        index.get("history#2", session_key="cli:direct", include_other_sessions=False)


def test_get_history_entry_in_full(two_chats: Workspace, index: RecallIndex) -> None:
    text = index.get("history#1")

    assert text.splitlines()[0] == (
        "history#1 (2026-04-01 09:00, session cli:direct, summarises session cli:direct#0-3)"
    )
    assert "planning a trip to Kyoto in May" in text


def test_get_session_message_with_neighbours(two_chats: Workspace, index: RecallIndex) -> None:
    text = index.get("session cli:direct#2", around=1)

    # the cited message first (a small model answers from the first one it reads)
    assert text.splitlines()[:2] == ["session cli:direct, message #2 user, 2026-04-02 10:00 (cited)", "done"]
    assert "Around it (messages 1-3 of 5):" in text
    assert "--- #1 assistant, 2026-04-02 10:00\nbook a ryokan in Kyoto" in text
    assert "--- #2 user (the cited message, above)\n--- #3 assistant" in text
    assert "#4" not in text and "#0" not in text
    assert index.get("session cli:direct#2", around=0).splitlines()[1:] == ["done"]


def test_get_memory_lines_around(two_chats: Workspace, index: RecallIndex) -> None:
    text = index.get("memory/MEMORY.md:4", around=1)

    assert (
        text
        == "memory/MEMORY.md lines 3-5 of 5\n 3  - Loves Kyoto\n>4  - Vegetarian\n 5  - Runs on Sundays"
    )


@pytest.mark.parametrize(
    "citation",
    [
        "history#999",
        "session nosuch:chat#0",
        "session cli:direct#77",
        "memory/MEMORY.md:99",
        "../../etc/passwd:1",
        "AGENTS.md:1",
        "just words",
    ],
)
def test_get_rejects_bad_citations(two_chats: Workspace, index: RecallIndex, citation: str) -> None:
    (two_chats.root / "AGENTS.md").write_text("not indexed\n", encoding="utf-8")
    with pytest.raises(RecallError):
        index.get(citation)


def test_every_search_citation_expands(two_chats: Workspace, index: RecallIndex) -> None:
    for hit in index.search("kyoto", k=10):
        assert index.get(hit.citation, around=0)


def test_a_citation_copied_with_the_match_marks_still_expands(
    two_chats: Workspace, index: RecallIndex
) -> None:
    # A small model copies search output as it was shown, «marks» included.
    hit = index.search("kyoto", k=1)[0]
    marked = hit.citation.replace("session", "«session»").replace("history", "«history»")
    assert index.get(marked, around=0) == index.get(hit.citation, around=0)


def test_a_citation_copied_with_its_date_still_expands(two_chats: Workspace, index: RecallIndex) -> None:
    # Recalled memory shows "history#5, Wed 2 December 2026 22:20"; a small model passes it whole.
    for hit in index.search("kyoto", k=5):
        dated = f"{hit.citation}, Wed 2 December 2026 22:20"
        assert index.get(dated, around=0) == index.get(hit.citation, around=0)


def test_a_whole_search_result_passed_as_citation_expands_its_citation(
    two_chats: Workspace, index: RecallIndex
) -> None:
    # The local model passed a memory_search result line on whole, its text and all.
    for line in format_hits(index.search("kyoto", k=5)).splitlines():
        cited = line[1 : line.index("]")]
        assert index.get(line, around=0) == index.get(cited, around=0)


def test_hits_to_json_is_serialisable(two_chats: Workspace, index: RecallIndex) -> None:
    data = hits_to_json(index.search("kyoto"))

    assert json.loads(json.dumps(data)) == data
    assert {
        "citation",
        "kind",
        "snippet",
        "score",
        "timestamp",
        "session_key",
        "other_session",
    } <= set(data[0])


def test_format_hits_one_line_per_hit(two_chats: Workspace, index: RecallIndex) -> None:
    hits = index.search("vegetarian")
    assert (
        format_hits(hits) == "[memory/MEMORY.md:4] - Loves Kyoto - «Vegetarian» - Runs on Sundays"
    )
    assert format_hits([]) == "No matches."


async def test_memory_search_tool(two_chats: Workspace, index: RecallIndex) -> None:
    tools = recall_tools(index, session_key="cli:direct")
    search = _tool(tools, "memory_search")

    result = await search.invoke({"query": "ryokan", "k": 3, "scope": "sessions"})

    assert (
        result.text.splitlines()[0]
        == "[session cli:direct#1] 2026-04-02 10:00 assistant: book a «ryokan» in Kyoto"
    )
    assert "memory_get" in result.text
    assert search.parameters["properties"]["scope"]["enum"] == [
        "all",
        "history",
        "sessions",
        "memory",
    ]
    assert (await search.invoke({"query": "zzzz-nothing"})).text == "No matches for 'zzzz-nothing'."


async def test_memory_get_tool(two_chats: Workspace, index: RecallIndex) -> None:
    tools = recall_tools(index, session_key="cli:direct", include_other_sessions=False)
    get = _tool(tools, "memory_get")

    assert "ryokan" in (await get.invoke({"citation": "session cli:direct#1", "around": 0})).text
    with pytest.raises(ToolError):
        await get.invoke({"citation": "session telegram:99#0"})
    with pytest.raises(ToolError):
        await get.invoke({"citation": "nonsense"})


async def test_private_tool_search_hides_other_chats(
    two_chats: Workspace, index: RecallIndex
) -> None:
    search = _tool(
        recall_tools(index, session_key="cli:direct", include_other_sessions=False), "memory_search"
    )

    text = (await search.invoke({"query": "budget"})).text

    assert "telegram" not in text and text.startswith("No matches")


async def test_tools_run_through_the_registry(two_chats: Workspace, index: RecallIndex) -> None:
    registry = ToolRegistry(recall_tools(index, session_key="cli:direct"))

    found = await registry.execute("memory_search", '{"query": "vegetarian", "scope": "memory"}')
    bad = await registry.execute("memory_get", '{"citation": "history#12345"}')
    wrong_scope = await registry.execute("memory_search", '{"query": "x", "scope": "web"}')

    assert not found.is_error and found.text.startswith("[memory/MEMORY.md:4]")
    assert bad.is_error and "no history entry #12345" in bad.text
    assert wrong_scope.is_error


def test_the_window_around_a_message_shows_what_was_said_not_the_tool_steps(
    ws: Workspace, index: RecallIndex
) -> None:
    # Expanding the garden, the local model answered with the window's first line: the
    # arguments of an edit_file call made a message earlier.
    ws.add_message("cli:s", "user", "The weather is awful today.")
    call = {"id": "c1", "type": "function",
            "function": {"name": "edit_file", "arguments": '{"old_text": "The weather is awful"}'}}  # fmt: skip
    ws.add_message("cli:s", "assistant", "", tool_calls=[call])
    ws.add_message("cli:s", "tool", "Error: MEMORY.md does not exist", tool_call_id="c1", name="edit_file")
    ws.add_message("cli:s", "assistant", "Sorry about the weather.")
    ws.add_message("cli:s", "user", "About the garden: I decided to plant tomatoes and basil.")

    window = index.get("session cli:s#4", around=3)

    assert "Around it (messages 1-4 of 5, 2 tool steps left out):" in window
    assert "edit_file" not in window and "does not exist" not in window
    assert "Sorry about the weather." in window and "#4 user" in window
    # a tool step is shown when it is the message cited
    assert "does not exist" in index.get("session cli:s#2", around=0)
