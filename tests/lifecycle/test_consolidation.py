"""Consolidation as a user relies on it: facts survive the context window, nothing is lost."""

from __future__ import annotations

import json
from datetime import timedelta

from hippobot.agent.api import Api
from hippobot.context import tokens
from hippobot.lifecycle.archive_retry import RETRY_AFTER_S
from hippobot.lifecycle.summaries import parse_summary, raw_entry
from hippobot.memory.history import HistorySource
from hippobot.testing.archivist import archivist, is_archive_request

SMALL = {"context_window_tokens": 5250, "max_tokens": 500}  # compact prompt: the room 6,000 left the full one


def history_lines(agent):
    path = agent.workspace / "memory" / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def request_tokens(request) -> int:
    return tokens.count_messages(request.messages) + tokens.count_tools(request.tools)


async def archive_all(agent, key: str = "cli:direct"):
    """Archive every message of the session now (what /new asks of the consolidator)."""
    session = agent.sessions.get(key)
    return await agent.consolidator.archive_until(session, len(session.messages))


async def archived_summary(agent, scripted_model, said: str, summary: str):
    """The user says ``said``, the archivist answers ``summary``: the outcome and the entry."""
    scripted_model.reply("noted")
    await agent.turn("cli:direct", said)
    scripted_model.reply(summary)
    outcome = await archive_all(agent)
    return outcome, history_lines(agent)[0]["content"]


async def chat(agent, n: int, key: str = "cli:direct", planted: dict[int, str] | None = None) -> None:
    planted = planted or {}
    for i in range(n):
        filler = f"Turn {i}: let us talk about gardening, compost, tomatoes and rain barrels. " * 6
        text = f"{planted[i]}\n{filler}" if i in planted else filler
        await agent.turn(key, text)
        await agent.jobs.drain()


async def test_planted_facts_stay_in_the_prompt_after_several_consolidations(make_agent, scripted_model):
    agent = make_agent(**SMALL)
    scripted_model.fallback = archivist
    planted = {
        0: "FACT: User's cat is named Luna",
        1: "FACT: User lives in Tokyo",
        3: "FACT: User's favourite editor is Helix",
        9: "CORRECTION: User moved to Osaka, not Tokyo",
    }
    await chat(agent, 45, planted=planted)

    archive_calls = [r for r in scripted_model.requests if is_archive_request(r)]
    assert len(archive_calls) >= 3, "the conversation should have been consolidated several times"
    entries = history_lines(agent)
    assert all(e["source"]["session"] == "cli:direct" for e in entries)
    # Every planted fact reached the archive, the correction as a correction.
    archived = "\n".join(e["content"] for e in entries)
    assert "- [permanent] User's cat is named Luna" in archived
    assert "- [correction] User moved to Osaka, not Tokyo" in archived
    # ... and is in the system prompt of the latest normal request (Recent History).
    last_turn = [r for r in scripted_model.requests if not is_archive_request(r)][-1]
    system = last_turn.messages[0]["content"]
    for fact in ("cat is named Luna", "favourite editor is Helix", "moved to Osaka, not Tokyo"):
        assert fact in system
    # The prompt never exceeded the input budget.
    budget = agent.budget.input
    assert max(request_tokens(r) for r in scripted_model.requests if not is_archive_request(r)) <= budget
    # Raw messages stay on disk: consolidation only moves the pointer.
    assert len(agent.sessions.get("cli:direct").messages) == 90


async def test_the_summary_request_shares_the_previous_requests_prefix(make_agent, scripted_model):
    agent = make_agent(**SMALL)
    scripted_model.fallback = archivist
    await chat(agent, 30)
    requests = scripted_model.requests
    index = next(i for i, r in enumerate(requests) if is_archive_request(r) and r.last_user_text().startswith("[Memory"))
    summary, before = requests[index], requests[index - 1]
    assert summary.tool_choice == "none"
    assert summary.tools == before.tools
    dump = lambda msgs: [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in msgs]  # noqa: E731
    assert dump(summary.messages)[: len(before.messages)] == dump(before.messages)


async def test_a_failing_summary_becomes_a_bounded_raw_entry_and_chat_goes_on(make_agent, scripted_model):
    agent = make_agent(**SMALL)
    replies = iter(range(10_000))

    def broken_archivist(request):
        if is_archive_request(request):
            return "I am sorry, I cannot summarise this conversation."
        return f"ok {next(replies)}"

    scripted_model.fallback = broken_archivist
    await chat(agent, 25)
    entries = history_lines(agent)
    assert entries and all(e["content"].startswith("[RAW] ") for e in entries)
    assert all(len(e["content"]) < 17_000 for e in entries)
    session = agent.sessions.get("cli:direct")
    assert session.last_consolidated > 0
    scripted_model.fallback = None
    scripted_model.reply("still here")
    assert (await agent.turn("cli:direct", "are you there?")).reply == "still here"


async def test_a_crash_between_entry_and_pointer_neither_loses_nor_duplicates(make_agent, scripted_model):
    agent = make_agent(**SMALL)
    scripted_model.fallback = archivist
    await chat(agent, 4, planted={0: "FACT: User plays the cello"})
    session = agent.sessions.get("cli:direct")
    # Simulate a crash after the summary was appended but before the pointer moved.
    agent.memory.append_history(
        "- [permanent] User plays the cello", session_key="cli:direct",
        source=HistorySource(session="cli:direct", start=0, end=4),
    )
    assert session.last_consolidated == 0
    agent.consolidator.repair(session)
    assert session.last_consolidated == 4
    await agent.consolidator.archive_until(session, 4)
    assert sum("cello" in e["content"] for e in history_lines(agent)) == 1


async def test_new_archives_in_the_background_and_starts_fresh(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.fallback = archivist
    await agent.turn("cli:direct", "FACT: User's sister is called Mira")
    reply = (await Api.for_agent(agent).handle("cli:direct", "/new")).reply
    assert reply.startswith("New session started.")
    await agent.aclose()
    entries = history_lines(agent)
    assert any("sister is called Mira" in e["content"] for e in entries)
    await agent.turn("cli:direct", "hello again")
    last = scripted_model.requests[-1]
    convo = json.dumps(last.messages[1:])
    assert "Mira" not in convo  # the old conversation is no longer replayed...
    assert "sister is called Mira" in last.messages[0]["content"]  # ...but remembered


async def test_an_unfinished_new_is_resumed_by_the_next_process(make_agent, scripted_model):
    from hippobot.agent.agent import Agent

    agent = make_agent()
    scripted_model.fallback = archivist
    await agent.turn("cli:direct", "FACT: User's bike is green")
    session = agent.sessions.get("cli:direct")
    session.metadata["fresh_start"] = len(session.messages)  # /new recorded, archive never ran
    await agent.sessions.save_meta(session)

    second = Agent(agent.settings)
    assert await second.consolidator.resume_pending() == 1
    await second.aclose()
    assert any("bike is green" in e["content"] for e in history_lines(second))


async def test_idle_sessions_are_compacted_into_an_archived_summary(make_agent, scripted_model):
    agent = make_agent(idle_compact_after_minutes=1)
    scripted_model.fallback = archivist
    await agent.turn("cli:direct", "FACT: User's flight leaves Friday at 9")
    session = agent.sessions.get("cli:direct")
    session.updated_at = "2020-01-01T00:00:00+00:00"
    assert agent.consolidator.idle_due(session)
    await agent.turn("cli:direct", "what was I saying?")
    last = [r for r in scripted_model.requests if not is_archive_request(r)][-1]
    assert "flight leaves Friday at 9" in last.messages[0]["content"]
    assert session.summary is not None


def test_summary_parser_accepts_the_line_format_and_rejects_garbage():
    parsed = parse_summary("Here you go:\n- [permanent] Has a cat\n* [CORRECTION] Lives in Osaka, not Tokyo\n")
    assert parsed.lines == ("- [permanent] Has a cat", "- [correction] Lives in Osaka, not Tokyo")
    assert parse_summary("(nothing)").nothing
    assert not parse_summary("I cannot do that").ok
    assert not parse_summary("").ok


def test_raw_entries_are_bounded_and_say_where_the_messages_are():
    msgs = [{"role": "user", "content": "x" * 50_000, "timestamp": "2026-01-01T10:00:00"}]
    text = raw_entry(msgs, session_key="cli:direct", start=3, end=4, reason="timeout")
    assert text.startswith("[RAW] 1 messages (summary failed: timeout)")
    assert len(text) < 16_500
    assert "cli:direct #3-3" in text


async def test_a_summary_call_that_errors_out_leaves_the_slice_pending_until_a_retry(make_agent, scripted_model):
    agent = make_agent()  # retries without waiting (see conftest)
    scripted_model.reply("noted")
    await agent.turn("cli:direct", "FACT: User's locker code is 4711")
    session = agent.sessions.get("cli:direct")
    for _ in range(4):
        scripted_model.fail(503)  # every attempt of the summary call fails
    outcome = await agent.consolidator.archive_until(session, len(session.messages))
    assert outcome is not None and outcome.failed and not outcome.raw
    assert history_lines(agent) == [] and session.last_consolidated == 0
    wait = session.archive_wait()
    assert wait is not None and (wait.start, wait.end) == (0, 2) and "503" in wait.reason
    # A retry right away is not sent; one after the pause is, and archives the slice.
    assert await agent.consolidator.archive_until(session, 2) is None
    scripted_model.fallback = archivist
    later = agent.consolidator.now() + timedelta(seconds=RETRY_AFTER_S + 1)
    agent.consolidator.now = lambda: later
    outcome = await agent.consolidator.archive_until(session, 2)
    assert outcome is not None and outcome.entry is not None
    (entry,) = history_lines(agent)
    assert "locker code is 4711" in entry["content"] and not entry["content"].startswith("[RAW]")
    assert session.last_consolidated == 2 and session.archive_wait() is None
    assert session.archive_failure is None


async def test_a_slice_that_keeps_failing_ends_as_a_bounded_raw_entry_with_the_stated_facts(
        make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("noted")
    await agent.turn("cli:direct", "Remember that my locker code is 4711. The weather is grey.")
    session = agent.sessions.get("cli:direct")
    start = agent.consolidator.now()
    for hours in (0, 1, 2):  # three failed attempts, the first two hours before the last
        scripted_model.reply("I am sorry, I cannot summarise this.")
        agent.consolidator.now = lambda h=hours: start + timedelta(hours=h)
        await agent.consolidator.archive_until(session, len(session.messages))
    # the archives only: the request itself was kept at once, in the user's words
    (entry,) = [e for e in history_lines(agent) if e.get("source")]
    assert entry["content"].startswith("[RAW] 2 messages (summary failed:")
    assert "- [permanent] User's locker code is 4711" in entry["content"].splitlines()
    assert session.last_consolidated == 2 and session.archive_wait() is None


async def test_a_save_summary_tool_call_is_accepted(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("noted")
    await agent.turn("cli:direct", "I prefer tea over coffee")
    scripted_model.reply_tool_call(
        "save_summary", {"facts": [{"kind": "permanent", "text": "User prefers tea over coffee"}]}
    )
    outcome = await archive_all(agent)
    assert outcome is not None and not outcome.raw
    assert history_lines(agent)[0]["content"] == "- [permanent] User prefers tea over coffee"


async def test_a_background_consolidation_leaves_a_turn_still_running_alone(make_agent, scripted_model):
    """Another process (or a turn of this one) is half-way through a turn in the session:
    its tool call is on disk, its result not yet. Consolidation must neither cut that turn
    in two nor show the model a stand-in result for it."""
    from hippobot.agent.agent import Agent
    from hippobot.session.model import SYNTHETIC_TOOL_RESULT

    agent = make_agent(**SMALL)
    scripted_model.fallback = archivist
    key = "cli:direct"
    await chat(agent, 6)
    other = Agent(agent.settings)  # a second process on the same workspace
    theirs = await other.sessions.aget(key)
    call = {"id": "call_running", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": "USER.md"})}}
    filler = "Their turn: tomatoes, compost heaps and rain barrels, at length. " * 160
    await other.sessions.append(theirs, {"role": "user", "content": filler})
    await other.sessions.append(theirs, {"role": "assistant", "content": "", "tool_calls": [call]})
    asked_at = len(theirs.messages) - 2
    before = len(scripted_model.requests)

    await agent.consolidator.consolidate_locked(key)

    ours = agent.sessions.get(key)
    assert ours.last_consolidated > 0, "consolidation was due: the test did not test"
    assert ours.last_consolidated <= asked_at, "the running turn was cut in two"
    summary_requests = scripted_model.requests[before:]
    assert summary_requests and all(is_archive_request(r) for r in summary_requests)
    assert not any(m.get("content") == SYNTHETIC_TOOL_RESULT
                   for r in summary_requests for m in r.messages), "a stand-in for a result still to come"

    # Their turn ends; our next turn replays the call with its real result.
    await other.sessions.append(theirs, {"role": "tool", "tool_call_id": "call_running",
                                         "name": "read_file", "content": "# User"})
    await other.sessions.append(theirs, {"role": "assistant", "content": "Read it."})
    await other.aclose()
    scripted_model.reply("Noted.")
    await agent.turn(key, "and now?")
    replay = scripted_model.requests[-1].messages
    at = next(i for i, m in enumerate(replay) if m.get("tool_calls") == [call])
    assert replay[at + 1] == {"role": "tool", "tool_call_id": "call_running", "name": "read_file",
                              "content": "# User"}


async def test_summary_lines_that_only_say_what_went_unsaid_are_not_archived(make_agent, scripted_model):
    # What Qwen2.5-Coder-1.5B wrote for a short conversation: the one fact, and "corrections"
    # about what the user had not said, which a Dream batch could never place in a file.
    outcome, content = await archived_summary(
        make_agent(), scripted_model, "My cat is called Miso",
        "- [durable] User's cat is called Miso\n"
        "- [correction] The user's name was not mentioned\n"
        "- [correction] No location was provided in the conversation\n"
        "- [durable] User has not specified their age yet",
    )
    assert outcome is not None and not outcome.raw
    assert content == "- [durable] User's cat is called Miso"


def test_a_summary_of_only_unsaid_things_is_an_empty_answer_not_a_failed_one():
    parsed = parse_summary("- [correction] The user's name was not mentioned\n- [durable] User's age: unknown")
    assert parsed.ok and parsed.nothing and parsed.lines == ()
    # ...while a fact with a negation in it stays a fact.
    kept = parse_summary("- [durable] User does not eat meat\n- [durable] User did not tell his boss about the move")
    assert len(kept.lines) == 2


async def test_a_summary_line_naming_someone_the_conversation_never_did_is_not_archived(
    make_agent, scripted_model
):
    # What Qwen2.5-Coder-1.5B summarised a session about a locker code and a move to Osaka
    # with: a "correction" of the user's name to one nobody had said. Dream placed it.
    outcome, content = await archived_summary(
        make_agent(), scripted_model, "I'm Maya. Correction: I live in Osaka now, not in Tokyo.",
        "- [durable] User lives in Osaka now, not in Tokyo\n"
        "- [correction] The user corrected their name from Maya to Lily\n"
        "- [permanent] User's locker code is 1234",
    )
    assert outcome is not None and not outcome.raw
    assert "Lily" not in content and "1234" not in content
    assert "- [durable] User lives in Osaka now, not in Tokyo" in content
    assert "Maya" in content  # the user's own words, kept as a stated fact


async def test_a_summary_of_only_invented_lines_archives_what_the_user_said(make_agent, scripted_model):
    outcome, content = await archived_summary(
        make_agent(), scripted_model, "Remember this: my locker code at work is 4417.",
        "- [permanent] User's name is Lily",
    )
    assert outcome is not None and not outcome.raw and outcome.failed is None
    assert "Lily" not in content and "4417" in content


def test_a_summary_may_name_a_date_it_worked_out_and_what_it_was_shown():
    from hippobot.factmatch import Said, unsaid_names

    said = Said.of("[Runtime Context] Current Time: 2026-12-04 10:00 (Friday)\nuser: the demo is next Friday at Acme")
    assert unsaid_names("User's demo at Acme is on Friday 2026-12-11 at 10:00", said) == []
    assert unsaid_names("User's demo is at Globex, room 4417", said) == ["4417", "globex"]
    # a name translated, or a noun capitalised in German, is not an invention
    assert unsaid_names("User lives in Munich", Said.of("user: Ich wohne in München")) == []
    german = Said.of("user: Ich wohne in München, Nutzerin seit 2020")
    assert unsaid_names("Der Nutzer wohnt in München", german) == []
