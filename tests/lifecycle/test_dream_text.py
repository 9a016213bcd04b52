"""Dream with a model that cannot call tools: findings still reach the memory files."""

from __future__ import annotations

from hippobot.lifecycle.dream_text import LEARNED_HEADING, edits_from_findings, parse_text_edits
from hippobot.memory.history import HistorySource


def plant(agent, *facts: str, key: str = "cli:direct") -> None:
    for i, fact in enumerate(facts):
        agent.memory.append_history(fact, session_key=key, source=HistorySource(key, i * 2, i * 2 + 2))


async def test_a_prose_only_edit_phase_still_applies_the_findings(make_agent, scripted_model):
    agent = make_agent(text_tool_calls="off")
    plant(agent, "- [permanent] User has a cat named Luna", "- [permanent] User works at Initech as a nurse")
    scripted_model.reply("[USER] Has a cat named Luna\n[USER] Works at Initech as a nurse")
    scripted_model.reply("I have updated the files as requested.")  # no tool call, no edit block
    result = await agent.dream.run()
    assert result.status == "done", result.describe()
    user = (agent.workspace / "USER.md").read_text()
    assert f"{LEARNED_HEADING}\n- Has a cat named Luna\n- Works at Initech as a nurse\n" in user
    assert agent.memory.pending_count() == 0
    assert result.files == ("USER.md",) and result.commit

    # The next session's prompt carries them.
    scripted_model.reply("Luna.")
    await agent.turn("cli:fresh", "What is my cat called?")
    assert "Has a cat named Luna" in scripted_model.requests[-1].messages[0]["content"]


async def test_edit_blocks_in_the_answer_are_applied_exactly(make_agent, scripted_model):
    agent = make_agent(text_tool_calls="off")
    ws = agent.workspace
    (ws / "USER.md").write_text("# User\n\n- Lives in Tokyo\n- Likes tea\n")
    plant(agent, "- [correction] User lives in Osaka, not Tokyo")
    scripted_model.reply('[USER] Lives in Osaka, not Tokyo\n[FILE-REMOVE] USER.md: "Lives in Tokyo" — moved')
    scripted_model.reply("EDIT USER.md\n<<<\n- Lives in Tokyo\n===\n- Lives in Osaka\n>>>\n")
    result = await agent.dream.run()
    assert result.status == "done", result.describe()
    assert (ws / "USER.md").read_text() == "# User\n\n- Lives in Osaka\n- Likes tea\n"


async def test_a_text_path_removal_and_no_duplicates(make_agent, scripted_model):
    agent = make_agent(text_tool_calls="off")
    ws = agent.workspace
    (ws / "USER.md").write_text("# User\n\n- Lives in Tokyo\n- Has a cat named Luna\n")
    plant(agent, "- [correction] User lives in Osaka, not Tokyo")
    scripted_model.reply(
        '[USER] Lives in Osaka\n[USER] Has a cat named Luna\n[FILE-REMOVE] USER.md: "Lives in Tokyo" — outdated'
    )
    scripted_model.reply("Done.")
    await agent.dream.run()
    text = (ws / "USER.md").read_text()
    assert "Tokyo" not in text and "- Lives in Osaka" in text
    assert text.count("Has a cat named Luna") == 1


def test_edit_blocks_for_other_files_are_ignored():
    text = "EDIT /etc/passwd\n<<<\nroot\n===\nx\n>>>\nAPPEND MEMORY.md\n- Uses PostgreSQL 16\n- Deploys on Fridays\n"
    edits = parse_text_edits(text)
    assert [(e.file, e.old, e.new) for e in edits] == [
        ("memory/MEMORY.md", "", "- Uses PostgreSQL 16\n- Deploys on Fridays")
    ]
    assert [e.file for e in edits_from_findings(["[SOUL] Answer briefly", "[SKIP] nothing", "[MEMORY] x"])] == [
        "SOUL.md", "memory/MEMORY.md"
    ]
