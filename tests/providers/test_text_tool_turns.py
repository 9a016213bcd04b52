"""A turn with a local model that writes its tool calls as text, over HTTP."""

from __future__ import annotations

import json

from hippobot.loop.events import ReplyDelta


async def test_a_written_tool_call_runs_and_only_the_answer_is_shown(make_agent, scripted_model):
    agent = make_agent()  # the scripted server is on 127.0.0.1: recovery is on by default
    (agent.workspace / "notes.txt").write_text("The cat is called Luna.")
    scripted_model.reply('```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```')
    scripted_model.reply("Your cat is called Luna.")
    shown: list[str] = []
    result = await agent.turn(
        "cli:direct", "What is my cat called?",
        on_event=lambda ev: shown.append(ev.text) if isinstance(ev, ReplyDelta) else None,
    )
    assert result.reply == "Your cat is called Luna."
    assert "".join(shown) == "Your cat is called Luna."  # the raw block never reached the screen
    follow_up = scripted_model.requests[-1].raw["messages"]
    assistant, tool = follow_up[-2], follow_up[-1]
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["name"] == "read_file"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"path": "notes.txt"}
    assert tool["role"] == "tool" and "Luna" in tool["content"]


async def test_with_recovery_off_the_text_is_the_answer(make_agent, scripted_model):
    agent = make_agent(text_tool_calls="off")
    block = '{"name": "read_file", "arguments": {"path": "notes.txt"}}'
    scripted_model.reply(block)
    assert (await agent.turn("cli:direct", "hi")).reply == block


async def test_json_naming_an_unknown_tool_stays_the_answer(make_agent, scripted_model):
    agent = make_agent()
    block = '```json\n{"name": "Luna", "species": "cat"}\n```'
    scripted_model.reply(block)
    assert (await agent.turn("cli:direct", "give me my cat as JSON")).reply == block
