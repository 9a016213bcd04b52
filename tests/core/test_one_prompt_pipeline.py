"""One prompt pipeline: what a turn sends, what /context shows and what the budget counts
come from the same prepared request."""

from __future__ import annotations

import json

from hippobot.agent.inspect import context_report


async def test_context_shows_exactly_what_the_next_turn_sends(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("first answer")
    await agent.turn("cli:direct", "first question")
    session = agent.sessions.get("cli:direct")
    prepared = agent.prompts.prepare(session)
    for message in prepared.messages:  # bookkeeping never reaches the wire
        assert not {"timestamp", "_runtime_context", "_command", "media"} & set(message)
    shown = context_report(agent, "cli:direct")
    assert shown.messages == prepared.messages
    assert shown.total_tokens == prepared.size()

    scripted_model.reply("second answer")
    await agent.turn("cli:direct", "second question")
    sent = scripted_model.requests[-1]
    assert sent.messages[: len(prepared.messages)] == json.loads(json.dumps(prepared.messages))
    assert [t["function"]["name"] for t in sent.tools] == prepared.tools.names()


async def test_the_consolidation_request_extends_the_turns_prefix(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("an answer")
    await agent.turn("cli:direct", "a question worth keeping")
    session = agent.sessions.get("cli:direct")
    prepared = agent.prompts.prepare(session)
    scripted_model.reply("- User asked a question worth keeping")
    await agent.consolidator.archive_until(session, len(session.messages))
    summary_request = scripted_model.requests[-1]
    assert summary_request.messages[: len(prepared.messages)] == json.loads(json.dumps(prepared.messages))
    assert summary_request.tool_choice == "none"
