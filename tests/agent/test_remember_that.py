""""Remember that…" is never only a claim: when the model writes nothing, hippobot keeps the
user's words itself (a pending [permanent] history entry pointing at the message) and says so
in one line: a dim line in the chat, stderr for -m (serve: tests/server/test_remembered.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hippobot.agent.agent import Agent
from hippobot.loop.events import AgentEvent, Remembered
from hippobot.memory.remember import remember_request
from hippobot.testing import ScriptedModel
from hippobot.testing.cli import run_cli
from hippobot.testing.server import ScriptedServer


async def test_a_claim_without_a_write_is_kept_and_said(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel
) -> None:
    agent = make_agent()
    scripted_model.reply("I remember that you're vegetarian.")  # a claim, no tool call
    events: list[AgentEvent] = []
    result = await agent.turn("cli:direct", "remember that I'm vegetarian", on_event=events.append)
    assert result.reply == "I remember that you're vegetarian."
    (entry,) = agent.memory.read_history(after=0)
    assert entry.content == (
        "- [permanent] remember that I'm vegetarian\n"
        "  (the user's own words, asked to be remembered: session cli:direct#0)"
    )
    assert entry.session_key == "cli:direct"
    assert "remember that I'm vegetarian" in agent.recall.get("session cli:direct#0", around=0)
    assert entry.cursor > agent.memory.dream_cursor()  # pending: Dream files it
    notes = [e.text for e in events if isinstance(e, Remembered)]
    assert notes == [f'kept in memory: "remember that I\'m vegetarian" (history#{entry.cursor}; Dream files it)']
    assert result.remembered == notes[0]

    # Every chat sees it at once (Recent History shows other chats' durable lines).
    scripted_model.reply("You are vegetarian.")
    await agent.turn("telegram:9", "Am I vegetarian?")
    assert "I'm vegetarian" in scripted_model.requests[-1].messages[0]["content"]
    # ... and recall before answering does not repeat the entry Recent History shows
    marker = agent.sessions.get("telegram:9").messages[0]["_recall"]
    assert {"citation": f"history#{entry.cursor}", "why": "in the system prompt"} in marker["left_out"]


async def test_a_turn_that_wrote_the_memory_file_adds_nothing(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel
) -> None:
    agent = make_agent()
    memory = agent.workspace / "memory" / "MEMORY.md"
    kept = memory.read_text(encoding="utf-8") + "\n- The user is vegetarian\n"
    scripted_model.reply_tool_call("write_file", {"path": "memory/MEMORY.md", "content": kept})
    scripted_model.reply("Saved: you are vegetarian.")
    events: list[AgentEvent] = []
    result = await agent.turn("cli:direct", "Please remember that I'm vegetarian.", on_event=events.append)
    assert "vegetarian" in memory.read_text(encoding="utf-8")
    assert agent.memory.read_history(after=0) == []
    assert result.remembered is None and not any(isinstance(e, Remembered) for e in events)


async def test_overwriting_memory_with_one_line_is_refused_and_the_fact_still_kept(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel
) -> None:
    # Seen with Qwen2.5-Coder-1.5B: asked to remember a locker code (and later asked a
    # question), it "saved" by write_file of MEMORY.md with two lines, dropping the rest.
    agent = make_agent()
    memory = agent.workspace / "memory" / "MEMORY.md"
    memory.write_text(memory.read_text(encoding="utf-8") + "- Lives in Osaka\n", encoding="utf-8")
    before = memory.read_text(encoding="utf-8")
    scripted_model.reply_tool_call("write_file", {"path": "memory/MEMORY.md", "content": "Locker code 4417\n"})
    scripted_model.reply("Saved.")
    result = await agent.turn("cli:direct", "Remember this: my locker code at work is 4417.")
    tool_result = scripted_model.requests[-1].messages[-1]
    assert tool_result["role"] == "tool"
    assert "would remove" in tool_result["content"] and "nothing was written" in tool_result["content"]
    assert "edit_file" in tool_result["content"]
    assert memory.read_text(encoding="utf-8") == before  # "Lives in Osaka" survives
    # no memory write happened, so hippobot keeps the user's words itself
    (entry,) = agent.memory.read_history(after=0)
    assert "4417" in entry.content and result.remembered is not None


async def test_the_runtime_context_copied_into_a_memory_file_is_refused(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel
) -> None:
    # Seen with Qwen2.5-Coder-1.5B: told "I live in Osaka now, not in Tokyo.", it wrote the
    # block hippobot adds to the message (time, channel, the recalled "I live in Tokyo."
    # lines) over SOUL.md, and Dream's batch was then held on SOUL.md's old value.
    agent = make_agent()
    soul = agent.workspace / "SOUL.md"
    before = soul.read_text(encoding="utf-8")
    scripted_model.reply("Noted.")
    await agent.turn("cli:earlier", "By the way, I live in Tokyo.")
    copied = "[runtime context]\nCurrent Time: 2026-12-02 10:16 (Wednesday) UTC\nChannel: cli\n" \
             "- [session cli:earlier#0] user: By the way, I live in Tokyo.\n"
    scripted_model.reply_tool_call("write_file", {"path": "SOUL.md", "content": copied})
    scripted_model.reply_tool_call("edit_file", {
        "path": "memory/MEMORY.md", "old_text": "# ", "new_text": "Memory recalled for this message:\n# "})
    scripted_model.reply("Saved.")
    await agent.turn("cli:later", "Correction: I live in Osaka now, not in Tokyo.")

    results = [m["content"] for m in scripted_model.requests[-1].messages if m.get("role") == "tool"]
    assert len(results) == 2
    assert all("runtime context" in r and "nothing was written" in r for r in results), results
    assert soul.read_text(encoding="utf-8") == before
    assert "Memory recalled" not in (agent.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    # a file outside memory is the model's to write as it likes
    scripted_model.reply_tool_call("write_file", {"path": "notes/context.txt", "content": copied})
    scripted_model.reply("Done.")
    await agent.turn("cli:later", "Save the context you see to notes/context.txt.")
    assert (agent.workspace / "notes" / "context.txt").read_text(encoding="utf-8") == copied


async def test_questions_about_memory_are_not_requests(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel
) -> None:
    agent = make_agent()
    scripted_model.reply("Yes, Luna.")
    await agent.turn("cli:direct", "Do you remember my cat's name?")
    assert agent.memory.read_history(after=0) == []


@pytest.mark.parametrize(
    "text",
    [
        "Please remember that I work at Initech as a nurse.",
        "Remember this: my locker code at work is 4417.",
        "Don't forget my sister's birthday is May 3.",
        "note that the wifi password changed",
        "Could you remember that I'm allergic to nuts?",
        "Keep in mind that I hate cilantro.",
        "Souviens-toi que je suis végétarienne.",
        "Merk dir: ich wohne in Berlin.",
        "Recuerda que soy vegetariano.",
        "请记住我是素食者",
    ],
)
def test_requests_to_keep_something_are_recognised(text: str) -> None:
    assert remember_request(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "Do you remember my cat?",
        "Remember when we went to Paris?",
        "I remember that film",
        "I can't remember the password",
        "Can you remember what I said last week?",
        "What is my name?",
    ],
)
def test_questions_and_memories_are_not_requests(text: str) -> None:
    assert remember_request(text) is None


def test_one_shot_says_it_on_stderr_and_replies_on_stdout(
    hippobot_home: Path, scripted_server: ScriptedServer, scripted_model: ScriptedModel
) -> None:
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    scripted_model.reply("Noted, you're vegetarian.")
    done = run_cli(["agent", "-m", "remember that I'm vegetarian"], hippobot_home, scripted_server)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Noted, you're vegetarian.\n"
    assert 'kept in memory: "remember that I\'m vegetarian" (history#1; Dream files it)' in done.stderr


@pytest.mark.parametrize(
    "said",
    [
        "Remember this: my locker code at work is 4417",
        "Please keep in mind that I hate cilantro",
        "N'oublie pas que mon vol part à 9 heures",
        "Merk dir, meine Schwester heißt Mira",
        "Do you remember my name",
        "I remember that film from last year",
    ],
)
def test_the_archive_keeps_a_request_to_remember_whenever_the_turn_would(said: str) -> None:
    """One detector: what the turn keeps as "asked to be remembered", the consolidator's
    stated facts keep as [permanent] (and neither treats a question or a memory as one)."""
    from hippobot.lifecycle.stated_facts import stated_facts

    facts = stated_facts([{"role": "user", "content": said}])
    asked = remember_request(said) is not None
    assert asked == any(f.kind == "permanent" for f in facts), (said, facts)
