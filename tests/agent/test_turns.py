"""A turn as a user experiences it: the reply, the session file, the tool steps, the failures.

Every test here drives the real OpenAI SDK client over HTTP against the scripted model.
"""

from __future__ import annotations

import itertools
import json

import pytest

from hippobot.agent.agent import Agent
from hippobot.agent.api import Api
from hippobot.errors import ProviderError, UserError
from hippobot.loop.events import ReplyDelta, ToolStarted
from hippobot.messages import RUNTIME_CONTEXT_HEADER
from hippobot.session.keys import key_to_relpath


def session_lines(agent, key="cli:direct"):
    path = agent.workspace / key_to_relpath(key)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def messages_of(agent, key="cli:direct"):
    return [r for r in session_lines(agent, key) if "role" in r]


async def test_two_turns_and_the_second_request_carries_the_first(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("Nice to meet you, Ada.").reply("You are Ada.")

    first = await agent.turn("cli:direct", "My name is Ada.")
    second = await agent.turn("cli:direct", "What is my name?")

    assert first.reply == "Nice to meet you, Ada."
    assert second.reply == "You are Ada."
    _req1, req2 = scripted_model.requests
    texts = [json.dumps(m, ensure_ascii=False) for m in req2.messages]
    assert any("My name is Ada." in t for t in texts)
    assert any("Nice to meet you, Ada." in t for t in texts)
    lines = session_lines(agent)
    assert lines[0]["_type"] == "session" and lines[0]["key"] == "cli:direct"
    roles = [m["role"] for m in messages_of(agent)]
    assert roles == ["user", "assistant", "user", "assistant"]


async def test_consecutive_requests_extend_each_other_byte_for_byte(make_agent, scripted_model):
    """The prompt-cache invariant: no memory event → request N+1 starts with request N."""
    agent = make_agent()
    for i in range(4):
        scripted_model.reply(f"answer {i}")
    for i in range(4):
        await agent.turn("cli:direct", f"question {i}")
    dumps = [[json.dumps(m, ensure_ascii=False, sort_keys=True) for m in r.messages] for r in scripted_model.requests]
    tools = [json.dumps(r.tools, sort_keys=True) for r in scripted_model.requests]
    assert len(set(tools)) == 1
    for before, after in itertools.pairwise(dumps):
        assert after[: len(before)] == before


async def test_user_message_carries_runtime_context_and_views_strip_it(make_agent, scripted_model):
    agent = make_agent(timezone="Europe/Paris")
    scripted_model.reply("ok")
    await agent.turn("cli:direct", "hello there")
    sent_user = scripted_model.requests[0].messages[-1]
    assert RUNTIME_CONTEXT_HEADER in sent_user["content"]
    assert "Channel: cli" in sent_user["content"] and "Chat ID: direct" in sent_user["content"]
    stored = messages_of(agent)[0]
    assert stored["content"] == sent_user["content"]  # replayed byte-identically
    assert stored["content"].endswith("hello there")  # the question comes last
    assert stored["_runtime_context"]["prefix"].startswith(RUNTIME_CONTEXT_HEADER)
    from hippobot.cli.sessions_cmds import public_messages

    assert public_messages([stored])[0]["text"] == "hello there"
    system = scripted_model.requests[0].messages[0]["content"]
    assert RUNTIME_CONTEXT_HEADER not in system


async def test_tools_create_read_and_edit_files_in_the_workspace(make_agent, scripted_model):
    agent = make_agent()
    seen = []
    scripted_model.reply_tool_call("write_file", {"path": "notes/todo.txt", "content": "buy milk\n"})
    scripted_model.reply_tool_call("edit_file", {"path": "notes/todo.txt", "old_text": "milk", "new_text": "oat milk"})
    scripted_model.reply_tool_call("exec", {"command": "cat notes/todo.txt"})
    scripted_model.reply("Done: the list says buy oat milk.")

    result = await agent.turn("cli:direct", "make a todo list", on_event=seen.append)

    assert (agent.workspace / "notes/todo.txt").read_text() == "buy oat milk\n"
    assert result.reply == "Done: the list says buy oat milk."
    assert [e.name for e in seen if isinstance(e, ToolStarted)] == ["write_file", "edit_file", "exec"]
    tool_msgs = [m for m in messages_of(agent) if m["role"] == "tool"]
    assert "buy oat milk" in tool_msgs[-1]["content"]
    # The last request shows the model the result of its shell command.
    assert "buy oat milk" in json.dumps(scripted_model.requests[-1].messages)


async def test_invalid_tool_arguments_go_back_to_the_model_and_the_turn_continues(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply_tool_call("write_file", '{"path": "a.txt", "content": ')
    scripted_model.reply_tool_call("no_such_tool", {})
    scripted_model.reply("Sorry, let me stop here.")
    result = await agent.turn("cli:direct", "write a file")
    assert result.reply == "Sorry, let me stop here."
    tool_results = [m["content"] for m in messages_of(agent) if m["role"] == "tool"]
    assert "not valid JSON" in tool_results[0]
    assert "no_such_tool" in tool_results[1]
    assert not (agent.workspace / "a.txt").exists()


async def test_an_endless_tool_loop_stops_at_the_iteration_cap(make_agent, scripted_model):
    agent = make_agent(max_tool_iterations=3)
    for _ in range(3):
        scripted_model.reply_tool_call("list_dir", {"path": "."})
    result = await agent.turn("cli:direct", "loop forever")
    assert "3 tool steps" in result.reply
    assert len(scripted_model.requests) == 3


async def test_a_failing_model_keeps_the_users_message(make_agent, scripted_model):
    agent = make_agent()
    for _ in range(4):
        scripted_model.fail(503)
    with pytest.raises(ProviderError) as info:
        await agent.turn("cli:direct", "remember: the key is under the mat")
    assert "503" in str(info.value) or "after" in str(info.value)
    stored = messages_of(agent)
    assert stored and stored[-1]["role"] == "user"
    assert "under the mat" in stored[-1]["content"]
    # The next turn replays that message and works.
    scripted_model.reply("Noted.")
    result = await agent.turn("cli:direct", "did you get that?")
    assert result.reply == "Noted."
    assert "under the mat" in json.dumps(scripted_model.requests[-1].messages)


async def test_slash_commands_are_answered_without_the_model(make_agent, scripted_model):
    agent = make_agent()
    help_text = (await Api.for_agent(agent).handle("cli:direct", "/help")).reply
    assert "/new" in help_text and "/dream-restore" in help_text
    unknown = (await Api.for_agent(agent).handle("cli:direct", "/frobnicate")).reply
    assert "/help" in unknown
    status = (await Api.for_agent(agent).handle("cli:direct", "/status")).reply
    assert "scripted-model" in status
    assert scripted_model.requests == []


async def test_a_path_that_looks_like_a_command_goes_to_the_model(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("That is the hosts file.")
    assert (await Api.for_agent(agent).handle("cli:direct", "/etc/hosts what is it?")).reply == "That is the hosts file."


async def test_a_double_slash_sends_the_text_to_the_model(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("That is how you ask for help.")
    reply = (await Api.for_agent(agent).handle("cli:direct", "//help means what?")).reply
    assert reply == "That is how you ask for help."
    assert "//help means what?" in json.dumps(scripted_model.requests[0].messages)


async def test_the_agent_itself_only_runs_model_turns(make_agent, scripted_model):
    agent = make_agent()  # commands are the front end's business (Api.handle)
    scripted_model.reply("You typed /help.")
    result = await agent.turn("cli:direct", "/help")
    assert result.reply == "You typed /help." and not result.command
    assert len(scripted_model.requests) == 1


async def test_secrets_are_not_written_to_the_session(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("I will not store it.")
    await agent.turn("cli:direct", "my key is sk-test-key-000000000000 and sk-proj-abcdefghijklmnop1234567890")
    raw = (agent.workspace / key_to_relpath("cli:direct")).read_text()
    assert "sk-test-key-000000000000" not in raw
    assert "sk-proj-abcdefghijklmnop1234567890" not in raw


async def test_the_same_conversation_works_through_the_anthropic_api(hippobot_home, scripted_server, scripted_model):
    from hippobot.agent.agent import Agent
    from hippobot.cli.onboard import onboard
    from hippobot.config import load_settings

    settings = load_settings({
        "HIPPOBOT_HOME": str(hippobot_home), "HIPPOBOT_PROVIDER": "anthropic",
        "HIPPOBOT_MODEL": "claude-test", "ANTHROPIC_API_KEY": "sk-ant-test-000000000000",
        "HIPPOBOT_API_BASE": scripted_server.anthropic_base_url,
    })
    onboard(settings)
    agent = Agent(settings)
    scripted_model.reply_tool_call("write_file", {"path": "hello.txt", "content": "hi"})
    scripted_model.reply("Wrote it.")
    scripted_model.reply("It says hi.")
    assert (await agent.turn("cli:direct", "write hello.txt")).reply == "Wrote it."
    assert (await agent.turn("cli:direct", "what does it say?")).reply == "It says hi."
    assert (agent.workspace / "hello.txt").read_text() == "hi"
    last = scripted_model.requests[-1]
    assert last.api == "anthropic"
    raw = last.raw
    assert raw["system"][0]["cache_control"] == {"type": "ephemeral"}
    kinds = [b.get("type") for m in raw["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert "tool_use" in kinds and "tool_result" in kinds


@pytest.mark.parametrize("bad_line", [
    {"role": "assistant", "content": None, "tool_calls": [5]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": 5, "function": [1]}]},
    {"role": "tool", "tool_call_id": 7, "content": "result"},
])
async def test_a_malformed_tool_call_line_is_set_aside_and_the_chat_goes_on(
    make_agent, scripted_model, bad_line
):
    """A session line with a tool call no endpoint accepts would make every later request
    fail; it is quarantined like any unreadable line, and the model never sees it."""
    agent = make_agent()
    scripted_model.reply("Noted.").reply("Still here.")
    await agent.turn("cli:direct", "I like tea")
    path = agent.workspace / key_to_relpath("cli:direct")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(bad_line) + "\n")

    later = Agent(agent.settings)  # the next start reads the file as it is on disk
    later.retry_policy = agent.retry_policy
    result = await later.turn("cli:direct", "Are you there?")

    assert result.reply == "Still here."
    sent = json.dumps(scripted_model.requests[-1].messages)
    assert "I like tea" in sent and '"tool_calls": [5]' not in sent and '"tool_call_id": 7' not in sent
    assert bad_line in [json.loads(x) for x in path.with_name(path.name + ".corrupt").read_text().splitlines()]


async def test_a_message_is_checked_once_whether_a_command_or_a_turn(
    make_agent, scripted_model, monkeypatch
):
    """The size and encoding check runs once per message: for a command in the Api, for a
    model turn in Agent.turn (it ran in both before)."""
    agent = make_agent(max_message_chars=40)
    checked: list[str] = []
    real_check = agent.check_message

    def check(text: str) -> None:
        checked.append(text)
        real_check(text)

    monkeypatch.setattr(agent, "check_message", check)
    api = Api.for_agent(agent)
    scripted_model.reply("Hello.").reply("It is a path.")
    assert (await api.handle("cli:direct", "hi")).reply == "Hello."
    assert "scripted-model" in (await api.handle("cli:direct", "/status")).reply
    assert (await api.handle("cli:direct", "/etc/hosts is a file")).reply == "It is a path."
    assert checked == ["hi", "/status", "/etc/hosts is a file"]
    for too_long in ("/status " + "x" * 50, "y" * 50):  # still refused either way
        with pytest.raises(UserError, match="maxMessageChars"):
            await api.handle("cli:direct", too_long)


async def test_an_empty_reply_is_asked_once_more_and_never_shown_as_nothing(make_agent, scripted_model):
    # What Qwen2.5-Coder-1.5B did for 5 of 100 LoCoMo questions: it ended its turn at once.
    agent = make_agent()
    scripted_model.reply("").reply("Luna.")
    events: list = []
    result = await agent.turn("cli:direct", "What is my cat called?", on_event=events.append)
    assert result.reply == "Luna."
    assert len(scripted_model.requests) == 2
    first, second = (r.raw["messages"] for r in scripted_model.requests)
    # Asked the same again, the local model came back empty again: the second ask is the
    # first plus one line asking for an answer, with the tools still offered.
    assert second[:-1] == first
    assert second[-1] == {"role": "user", "content": "Answer my message above in plain words."}
    assert scripted_model.requests[1].raw.get("tools")
    assert any("empty" in getattr(e, "text", "") for e in events)  # the wait is not silent
    assert [m["content"] for m in messages_of(agent) if m["role"] == "assistant"] == ["Luna."]
    assert not any("plain words" in str(m.get("content")) for m in messages_of(agent))  # not stored

    scripted_model.reply("").reply("")
    again = await agent.turn("cli:direct", "And my dog?")
    assert again.reply.startswith("The model gave an empty reply twice")
    assert len(scripted_model.requests) == 4  # asked once more, not in a loop
    # the note stays in the conversation, marked as hippobot's, and is never recalled as said
    note = [m for m in messages_of(agent) if m["role"] == "assistant"][-1]
    assert note["content"] == again.reply and note.get("_stand_in") is True
    hits = agent.recall.search("model gave an empty reply twice", k=5, session_key="cli:other")
    assert [h.citation for h in hits if h.kind == "session"] == []


async def test_a_json_block_for_an_answer_is_asked_for_in_words_unless_json_was_asked_for(
    make_agent, scripted_model
):
    # "What is my name?" was answered ```json {"name": "Maya"} ``` in 12 of 14 core runs with
    # Qwen2.5-Coder-1.5B: the fact, in its tool-call format.
    agent = make_agent()
    block = '```json\n{\n  "name": "Maya"\n}\n```'
    scripted_model.reply(block).reply("Your name is Maya.")
    events: list = []
    result = await agent.turn("cli:direct", "What is my name?", on_event=events.append)
    assert result.reply == "Your name is Maya."
    second = scripted_model.requests[1].raw["messages"]
    assert second[-1]["content"] == "Answer my message above in plain words."
    assert any("was a JSON block, not words" in getattr(e, "text", "") for e in events)
    assert [m["content"] for m in messages_of(agent) if m["role"] == "assistant"] == ["Your name is Maya."]

    # asked for words, it said nothing: the block said something, so the block is the answer
    scripted_model.reply(block).reply("")
    kept = await agent.turn("cli:direct", "What is my name?")
    assert kept.reply == block and len(scripted_model.requests) == 4

    # a bigger or nested object is data, not a slip
    nested = '{"user": {"name": "Maya", "city": "Osaka"}}'
    scripted_model.reply(nested)
    data = await agent.turn("cli:direct", "What do you know about me?")
    assert data.reply == nested and len(scripted_model.requests) == 5

    # asked for JSON, JSON is the answer, then and later in the conversation
    scripted_model.reply(block).reply(block)
    asked = await agent.turn("cli:direct", "From now on answer in JSON. What is my name?")
    later = await agent.turn("cli:direct", "What is my name?")
    assert asked.reply == later.reply == block and len(scripted_model.requests) == 7


async def test_a_reply_that_only_restates_what_was_said_beside_the_tool_call_is_asked_again(
    make_agent, scripted_model
):
    # Qwen2.5-Coder-1.5B wrote "This will search for the locker code in your memory and
    # return the relevant information." beside its memory_search call, and the same words
    # again, alone, after the results: the user got an announcement for an answer.
    agent = make_agent()
    agent_said = "This will search for the locker code in your memory and return the relevant information."
    scripted_model.reply_tool_call("memory_search", {"query": "locker code"}, text=agent_said)
    scripted_model.reply(agent_said + "\n").reply("Your locker code is 4417.")
    events: list = []
    result = await agent.turn("cli:direct", "What is my locker code?", on_event=events.append)
    assert result.reply == "Your locker code is 4417."
    assert len(scripted_model.requests) == 3
    last = scripted_model.requests[2].raw
    assert last["tool_choice"] == "none" and last["messages"][-1]["content"].startswith("Now answer my message")
    assert any("repeated what it wrote beside its tool call" in getattr(e, "text", "") for e in events)
    final = [m for m in messages_of(agent) if m["role"] == "assistant" and not m.get("tool_calls")]
    assert [m["content"] for m in final] == ["Your locker code is 4417."]


async def test_a_reply_that_repeats_a_tools_error_is_asked_once_more(make_agent, scripted_model):
    # Qwen2.5-Coder-1.5B called memory_get with a whole recalled line as the citation, then
    # answered with the error it got back; the user saw "Error: not a citation: ...".
    agent = make_agent()
    answers: list[str | None] = [None, "Your cat is called Luna."]  # None: copy the tool result

    def answer(request):
        said = answers.pop(0)
        tool = next(m for m in reversed(request.raw["messages"]) if m["role"] == "tool")
        return tool["content"] if said is None else said

    scripted_model.fallback = answer
    scripted_model.reply_tool_call("memory_get", {"citation": "my cat Luna"})
    events: list = []
    result = await agent.turn("cli:direct", "What is my cat called?", on_event=events.append)
    assert result.reply == "Your cat is called Luna."
    assert len(scripted_model.requests) == 3
    assert scripted_model.requests[1].raw["messages"] == scripted_model.requests[2].raw["messages"][:-1]
    assert any("repeated a tool's error" in getattr(e, "text", "") for e in events)
    replies = [m["content"] for m in messages_of(agent) if m["role"] == "assistant" and m.get("content")]
    assert replies == ["Your cat is called Luna."]  # the copied error is not kept as a reply

    # asked once, not in a loop: a second copy is what the user gets
    answers[:] = [None, None]
    scripted_model.reply_tool_call("memory_get", {"citation": "my dog"})
    again = await agent.turn("cli:direct", "And my dog?")
    assert again.reply.startswith("Error: not a citation")
    assert len(scripted_model.requests) == 6


async def test_an_empty_reply_after_tool_steps_is_asked_once_more(make_agent, scripted_model):
    # Seen with Qwen2.5-Coder-1.5B asked for a locker code: it read a file, then said nothing.
    agent = make_agent()
    (agent.workspace / "notes.txt").write_text("Locker code: 4417")
    scripted_model.reply_tool_call("read_file", {"path": "notes.txt"}).reply("").reply("It is 4417.")
    events: list = []
    result = await agent.turn("cli:direct", "What is my locker code?", on_event=events.append)
    assert result.reply == "It is 4417."
    assert len(scripted_model.requests) == 3
    # asked the same way again, the local model went on calling tools or ended empty again:
    # the second time it is told to answer (the tools stay listed and the messages are the
    # same up to that last one, so the cached prompt still serves)
    first, second = scripted_model.requests[1].raw, scripted_model.requests[2].raw
    assert first["tool_choice"] == "auto" and second["tool_choice"] == "none"
    assert second["messages"][:-1] == first["messages"] and first["tools"] == second["tools"]
    told = second["messages"][-1]
    assert told["role"] == "user" and "Do not call a tool" in told["content"]
    assert any("answer from what its tools returned" in getattr(e, "text", "") for e in events)
    # the words that told it are not the user's: never stored, never replayed
    assert not any("Do not call a tool" in str(m.get("content")) for m in messages_of(agent))
    scripted_model.reply("You're welcome.")
    await agent.turn("cli:direct", "Thanks!")
    assert "Do not call a tool" not in json.dumps(scripted_model.requests[-1].raw["messages"])


async def test_a_call_written_as_text_when_told_to_answer_is_never_shown(make_agent, scripted_model):
    agent = make_agent()
    (agent.workspace / "notes.txt").write_text("Locker code: 4417")
    raw = '<tools>\n{"name": "memory_get", "arguments": {"citation": "history#2"}}\n</tools>'
    scripted_model.reply_tool_call("read_file", {"path": "notes.txt"}).reply("").reply(raw)
    shown: list[str] = []
    result = await agent.turn(
        "cli:direct", "What is my locker code?",
        on_event=lambda ev: shown.append(ev.text) if isinstance(ev, ReplyDelta) else None,
    )  # fmt: skip
    assert result.reply.startswith("I completed the tool steps but could not produce a final answer")
    assert "<tools>" not in "".join(shown)  # not even streamed to the screen
    assert "<tools>" not in json.dumps(messages_of(agent))
    assert len(scripted_model.requests) == 3  # not asked a third time


async def test_a_reply_that_declines_after_tool_steps_that_found_the_fact_is_asked_to_answer(
    make_agent, scripted_model
):
    # Qwen2.5-Coder-1.5B read "User's locker code at work is 4417" in memory_get's result and
    # answered "I'm sorry, but I don't have enough information to provide the correct locker
    # code at work."
    agent = make_agent()
    entry = agent.memory.append_history("- [permanent] User's locker code at work is 4417", session_key="cli:old")
    scripted_model.reply_tool_call("memory_get", {"citation": f"history#{entry.cursor}"})
    scripted_model.reply("I'm sorry, but I don't have enough information to provide the correct locker code.")
    scripted_model.reply("Your locker code at work is 4417.")
    events: list = []
    result = await agent.turn("cli:direct", "What is my locker code at work?", on_event=events.append)
    assert result.reply == "Your locker code at work is 4417."
    last = scripted_model.requests[2].raw
    assert last["tool_choice"] == "none" and last["messages"][-1]["content"].startswith("Now answer my message")
    assert "4417" in last["messages"][-2]["content"]  # the tool result it is told to answer from
    assert any("could not answer after its tool steps" in getattr(e, "text", "") for e in events)

    # ... and so is "no ability to remember", read in the same place (a core run at 4328dba)
    scripted_model.reply_tool_call("memory_get", {"citation": f"history#{entry.cursor}"})
    scripted_model.reply("I'm sorry, but I don't have the ability to remember or access external sources like history files.")
    scripted_model.reply("Your locker code at work is 4417.")
    again = await agent.turn("cli:direct", "What is my locker code at work?")
    assert again.reply == "Your locker code at work is 4417." and len(scripted_model.requests) == 6

    # ... and so is a note that points to a tool instead of answering (memory_search's
    # result ends "Read more with memory_get(citation)")
    scripted_model.reply_tool_call("memory_search", {"query": "locker"})
    scripted_model.reply("To get the full text of the entry, you can use the `memory_get` function with the citation provided.")
    scripted_model.reply("Your locker code at work is 4417.")
    events.clear()
    pointed = await agent.turn("cli:direct", "What is my locker code at work?", on_event=events.append)
    assert pointed.reply == "Your locker code at work is 4417." and len(scripted_model.requests) == 9
    assert any("told you to call a tool instead of answering" in getattr(e, "text", "") for e in events)

    # asked once, not in a loop; and without tool steps a refusal is the answer
    scripted_model.reply("I don't know.")
    plain = await agent.turn("cli:direct", "What will the weather be in 2030?")
    assert plain.reply == "I don't know." and len(scripted_model.requests) == 10
