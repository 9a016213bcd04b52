"""Session as data: timestamps, pointer normalisation, and what gets replayed to the model."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippobot.messages import Message
from hippobot.session import SYNTHETIC_TOOL_RESULT, SYNTHETIC_TURN_START, Session


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def reply(text: str) -> Message:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "exec", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, text: str = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": "exec", "content": text}


def session_of(*messages: Message, last_consolidated: int = 0) -> Session:
    return Session(key="cli:direct", messages=list(messages), last_consolidated=last_consolidated)


def contents(messages: list[Message]) -> list[Any]:
    """Short labels: text, "calls" for tool calls, "<id>=<text>" for tool results."""
    return [
        f"{m['tool_call_id']}={m['content']}" if m["role"] == "tool" else m["content"] or "calls"
        for m in messages
    ]


# --- add and normalisation --------------------------------------------------------


def test_add_stamps_time_and_keeps_the_callers_dict_untouched() -> None:
    session = Session(key="cli:direct", created_at="2020-01-01T00:00:00+00:00")
    original = user("hi")
    stored = session.add(original)
    assert stored is session.messages[-1]
    assert "timestamp" not in original
    assert stored["timestamp"].startswith("20")
    assert session.updated_at == stored["timestamp"]
    kept = session.add({**reply("x"), "timestamp": "2021-05-05T10:00:00+00:00"})
    assert kept["timestamp"] == "2021-05-05T10:00:00+00:00"


def test_new_session_times_are_aware() -> None:
    session = Session(key="cli:direct")
    assert session.created_at == session.updated_at
    assert session.created_at[-6] in "+-"


@pytest.mark.parametrize("bad", [True, -1, 5, "2", 2.0, None])
def test_odd_last_consolidated_never_hides_history(bad: object) -> None:
    session = session_of(user("a"), reply("b"), last_consolidated=bad)  # type: ignore[arg-type]
    assert session.last_consolidated == 0
    assert len(session.get_history()) == 2


def test_metadata_that_is_not_a_dict_becomes_empty() -> None:
    assert Session(key="k", metadata=None).metadata == {}  # type: ignore[arg-type]


# --- get_history ------------------------------------------------------------------


TURNS = [
    user("u1"), calls("c1"), result("c1"), reply("a1"),
    user("u2"), calls("c2", "c3"), result("c2"), result("c3"), reply("a2"),
]  # fmt: skip


def test_empty_session_replays_nothing() -> None:
    assert Session(key="cli:direct").get_history() == []


def test_complete_groups_are_replayed_as_stored() -> None:
    session = session_of(*TURNS)
    history = session.get_history()
    assert len(history) == len(TURNS)
    assert all(a is b for a, b in zip(history, session.messages, strict=True))


def test_orphan_tool_results_at_the_window_start_are_dropped() -> None:
    session = session_of(*TURNS)
    assert contents(session.get_history(max_messages=3)) == [SYNTHETIC_TURN_START, "a2"]


def test_window_starting_mid_group_starts_at_the_next_user() -> None:
    session = session_of(*TURNS, last_consolidated=2)
    assert contents(session.get_history()) == ["u2", "calls", "c2=ok", "c3=ok", "a2"]


def test_interrupted_tool_call_gets_a_synthetic_result() -> None:
    session = session_of(user("u1"), calls("c1", "c2"), result("c1"))
    history = session.get_history()
    assert contents(history[:3]) == ["u1", "calls", "c1=ok"]
    assert history[3] == {
        "role": "tool",
        "tool_call_id": "c2",
        "name": "exec",
        "content": SYNTHETIC_TOOL_RESULT,
    }
    assert len(session.messages) == 3


def test_late_tool_result_after_the_next_user_message_is_not_replayed() -> None:
    session = session_of(user("u1"), calls("c1"), user("u2"), result("c1", "late"), reply("a"))
    history = session.get_history()
    assert contents(history) == ["u1", "calls", f"c1={SYNTHETIC_TOOL_RESULT}", "u2", "a"]


def test_duplicate_results_are_replayed_once() -> None:
    session = session_of(user("u"), calls("c1"), result("c1", "one"), result("c1", "two"))
    assert contents(session.get_history()) == ["u", "calls", "c1=one"]


def test_replay_starts_at_a_user_message() -> None:
    session = session_of(reply("proactive"), user("u1"), reply("a1"))
    assert contents(session.get_history()) == ["u1", "a1"]


def test_without_any_user_message_the_legal_slice_opens_with_a_stand_in_question() -> None:
    # The archive may cut a long tool-using turn at an assistant boundary; a replay that
    # opened with the assistant would be rejected by Anthropic, so a note stands in.
    session = session_of(result("x"), reply("a"), calls("c9"))
    assert contents(session.get_history()) == [
        SYNTHETIC_TURN_START, "a", "calls", f"c9={SYNTHETIC_TOOL_RESULT}"
    ]


def test_max_messages_keeps_the_newest_and_starts_at_a_user() -> None:
    turns = [m for i in range(5) for m in (user(f"u{i}"), reply(f"a{i}"))]
    session = session_of(*turns)
    assert contents(session.get_history(max_messages=4)) == ["u3", "a3", "u4", "a4"]
    assert contents(session.get_history(max_messages=3)) == ["u4", "a4"]


def test_max_tokens_keeps_the_newest_messages_that_fit() -> None:
    turns = [m for i in range(5) for m in (user(f"u{i}"), reply(f"a{i}"))]
    session = session_of(*turns)
    ten_each = lambda m: 10  # noqa: E731
    assert contents(session.get_history(max_tokens=45, count_tokens=ten_each)) == [
        "u3", "a3", "u4", "a4",
    ]  # fmt: skip
    assert contents(session.get_history(max_tokens=35, count_tokens=ten_each)) == ["u4", "a4"]


def test_max_tokens_reaches_back_to_the_question_of_a_long_tool_run() -> None:
    session = session_of(
        user("u1"), reply("a1"), user("u2"),
        calls("c1"), result("c1"), calls("c2"), result("c2"), reply("final"),
    )  # fmt: skip
    history = session.get_history(max_tokens=3, count_tokens=lambda m: 1)
    assert contents(history) == ["u2", "calls", "c1=ok", "calls", "c2=ok", "final"]


def test_default_token_estimate_works_offline() -> None:
    session = session_of(user("x" * 400), reply("y" * 400), user("short"), reply("ok"))
    assert contents(session.get_history(max_tokens=50)) == ["short", "ok"]


def test_consolidated_prefix_is_not_replayed() -> None:
    session = session_of(user("old"), reply("old reply"), user("new"), reply("r"),
                         last_consolidated=2)
    assert contents(session.get_history()) == ["new", "r"]
    assert contents(session.unconsolidated()) == ["new", "r"]


def test_command_echoes_are_hidden() -> None:
    session = session_of(
        user("u1"),
        {**user("/status"), "_command": True},
        {**reply("model: x"), "_command": True},
        reply("a1"),
    )
    assert contents(session.get_history()) == ["u1", "a1"]


def test_get_history_never_mutates_the_session() -> None:
    session = session_of(*TURNS, calls("dangling"), last_consolidated=2)
    before = copy.deepcopy(session.messages)
    session.get_history(max_messages=5)
    session.get_history(max_tokens=3, count_tokens=lambda m: 1)
    assert session.messages == before
    assert session.last_consolidated == 2


# --- property: every replay is legal ----------------------------------------------

ids = st.sampled_from(["a", "b", "c", "d"])
random_message = st.one_of(
    st.builds(user, st.just("u")),
    st.builds(reply, st.just("r")),
    st.lists(ids, min_size=1, max_size=3).map(lambda xs: calls(*xs)),
    st.builds(result, ids),
    st.builds(lambda: {**user("/c"), "_command": True}),
)


def assert_legal(history: list[Message]) -> None:
    open_calls: set[str] = set()
    answered: set[str] = set()
    for message in history:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls - answered, "orphan tool result"
            answered.add(message["tool_call_id"])
            continue
        assert open_calls <= answered, "tool call without a result"
        open_calls, answered = set(), set()
        for call in message.get("tool_calls") or []:
            open_calls.add(call["id"])
    assert open_calls <= answered, "tool call without a result"


@settings(max_examples=300)
@given(
    st.lists(random_message, max_size=25),
    st.integers(0, 30),
    st.integers(0, 12),
    st.integers(0, 40),
)
def test_replay_is_always_legal(
    messages: list[Message], consolidated: int, max_messages: int, max_tokens: int
) -> None:
    session = session_of(*messages, last_consolidated=consolidated)
    before = copy.deepcopy(session.messages)
    history = session.get_history(
        max_messages=max_messages, max_tokens=max_tokens, count_tokens=lambda m: 3
    )
    assert session.messages == before
    assert_legal(history)
    assert not any(m.get("_command") for m in history)
    window = [m for m in session.unconsolidated() if not m.get("_command")]
    if max_messages:
        window = window[-max_messages:]
    if any(m["role"] == "user" for m in window):
        assert history and history[0]["role"] == "user"
    assert not history or history[0]["role"] == "user"
