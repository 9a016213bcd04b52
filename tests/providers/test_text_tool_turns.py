"""A turn with a local model that writes its tool calls as text, over HTTP."""

from __future__ import annotations

import json

from hippobot.loop.events import ReplyDelta


async def turn_showing(agent, key: str, text: str):
    """The turn's result and the text the user saw streamed."""
    shown: list[str] = []
    result = await agent.turn(
        key, text, on_event=lambda ev: shown.append(ev.text) if isinstance(ev, ReplyDelta) else None
    )
    return result, "".join(shown)


async def test_a_written_tool_call_runs_and_only_the_answer_is_shown(make_agent, scripted_model):
    agent = make_agent()  # the scripted server is on 127.0.0.1: recovery is on by default
    (agent.workspace / "notes.txt").write_text("The cat is called Luna.")
    scripted_model.reply('```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```')
    scripted_model.reply("Your cat is called Luna.")
    result, shown = await turn_showing(agent, "cli:direct", "What is my cat called?")
    assert result.reply == "Your cat is called Luna."
    assert shown == "Your cat is called Luna."  # the raw block never reached the screen
    follow_up = scripted_model.requests[-1].raw["messages"]
    assistant, tool = follow_up[-2], follow_up[-1]
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["name"] == "read_file"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"path": "notes.txt"}
    assert tool["role"] == "tool" and "Luna" in tool["content"]


async def test_a_call_in_bold_with_bare_keys_runs_and_is_never_shown(make_agent, scripted_model):
    # Qwen2.5-Coder-1.5B's reply to a newcomer's first message, word for word but the date:
    # bold marks, keys and the tool's name without quotes, the runtime context as citation.
    agent = make_agent()
    scripted_model.reply(
        '**{name: memory_get, arguments: {"citation": "2026-12-02 13:21 (Wednesday) UTC (UTC+00:00) '
        '— Channel: cli — Chat ID: direct"}}**\nThis message confirms that the information was retrieved.'
    )
    scripted_model.reply("Nice to meet you, Maya.")
    result, shown = await turn_showing(agent, "cli:direct", "Hi, I'm Maya. My cat is called Luna.")
    assert result.reply == "Nice to meet you, Maya."
    assert "memory_get" not in shown and "**{" not in shown
    assistant, tool = scripted_model.requests[-1].raw["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "memory_get"
    assert tool["role"] == "tool" and "not" in tool["content"].lower()  # no such citation: it says so


async def test_bold_text_and_braces_in_prose_stay_the_answer(make_agent, scripted_model):
    agent = make_agent()
    for text in ("**Luna** is your cat.", "*{draft}* is a placeholder", "`{a: b}` maps a to b"):
        scripted_model.reply(text)
        assert (await agent.turn("cli:direct", "hi")).reply == text


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


async def test_qwens_tools_block_runs_and_a_made_up_citation_leads_back_to_the_recalled_memory(
    make_agent, scripted_model
):
    """Seen with Qwen2.5-Coder-1.5B: a <tools> block calling memory_get on the example
    citation of its description. It runs, the user sees only the answer, and the result sends
    the model back to the memory recalled for the message."""
    agent = make_agent()
    scripted_model.reply("Noted.")
    await agent.turn("cli:earlier", "My cat is called Luna, she is a grey tabby.")
    scripted_model.reply(
        '<tools>\n{"name": "memory_get", "arguments": {"citation": "history#42", "around": 3}}\n</tools>'
    )
    scripted_model.reply("Your cat is called Luna.")
    result, shown = await turn_showing(agent, "cli:fresh", "What is my cat called?")
    assert result.reply == "Your cat is called Luna." and shown == result.reply
    tool = scripted_model.requests[-1].raw["messages"][-1]
    assert tool["role"] == "tool"
    assert tool["content"].startswith("Error: no history entry #42. Use only citations you were shown.")
    assert "[session cli:earlier#0, " in tool["content"] and "My cat is called Luna" in tool["content"]


async def test_a_search_that_finds_nothing_leads_back_to_the_recalled_memory(make_agent, scripted_model):
    """Seen with Qwen2.5-Coder-1.5B: asked which city she lives in, it searched "city", got
    no match, and said it did not know, with "I live in Osaka now" recalled in front of it."""
    agent = make_agent()
    scripted_model.reply("Noted.")
    await agent.turn("cli:earlier", "Correction: I moved. I live in Osaka now, not in Tokyo.")
    scripted_model.reply('```json\n{"name": "memory_search", "arguments": {"query": "zzzz"}}\n```')
    scripted_model.reply("You live in Osaka.")
    result = await agent.turn("cli:fresh", "Which city do I live in now?")
    assert result.reply == "You live in Osaka."
    tool = scripted_model.requests[-1].raw["messages"][-1]
    assert tool["role"] == "tool" and tool["content"].startswith("No matches for 'zzzz'. The memory recalled")
    assert "[session cli:earlier#0, " in tool["content"] and "I live in Osaka now" in tool["content"]
    # with nothing recalled, the result is the plain one
    scripted_model.reply('```json\n{"name": "memory_search", "arguments": {"query": "zzzz"}}\n```')
    scripted_model.reply("I do not know.")
    await agent.turn("cli:other", "qqqq?")
    assert scripted_model.requests[-1].raw["messages"][-1]["content"] == "No matches for 'zzzz'."


async def test_a_written_call_to_a_tool_that_does_not_exist_is_answered_not_shown(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply('<tools>{"name": "memory", "arguments": {"query": "cat"}}</tools>')
    scripted_model.reply("I could not find it.")
    result = await agent.turn("cli:direct", "What is my cat called?")
    assert result.reply == "I could not find it."
    tool = scripted_model.requests[-1].raw["messages"][-1]
    assert tool["content"].startswith("Error: unknown tool 'memory'. Available tools: ")


def test_no_tool_description_carries_an_example_a_model_could_copy(make_agent):
    """Small models copy examples from descriptions as real arguments (history#42)."""
    agent = make_agent()
    text = json.dumps(agent.tools_for("cli:direct").schemas())
    for example in ("e.g.", "for example", "history#", "cli:direct#", "MEMORY.md:"):
        assert example not in text, example


async def test_a_written_call_with_broken_json_runs_into_an_error_the_model_can_fix(
    make_agent, scripted_model
):
    # Qwen2.5-Coder-1.5B asked for the locker code: a fenced memory_get call quoting a
    # recalled reply, fences and all, with a stray backtick after its argument. It had
    # been shown to the user as the answer.
    agent = make_agent()
    scripted_model.reply(
        '```json\n{\n  "name": "memory_get",\n  "arguments": {\n    "citation": "add this fact: '
        '```plaintext my_locker_code_at_work = 4417``"`\n  }\n}\n```'
    )
    scripted_model.reply("Your locker code is 4417.")
    result, shown = await turn_showing(agent, "cli:direct", "What is my locker code at work?")

    assert result.reply == shown == "Your locker code is 4417."
    assistant, tool = scripted_model.requests[-1].raw["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "memory_get"
    assert tool["role"] == "tool" and "not valid JSON" in tool["content"]
