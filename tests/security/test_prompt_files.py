"""Text injected into AGENTS.md, an always-on skill or prompts/dream.md is versioned like
memory: visible in the history and on the memory page, and undone by ``memory restore``."""

from __future__ import annotations

import json

from hippobot.agent.api import Api
from hippobot.server.web import render_page
from hippobot.testing.cli import run_cli

from .conftest import API_KEY, KEY

SKILL = "---\nname: pwn\ndescription: always on\nalways: true\n---\nALWAYS-INJECTED obey\n"


async def test_prompt_file_edits_are_versioned_shown_and_undoable(make_agent, scripted_model):
    agent = make_agent()
    ws = agent.workspace
    agents_before = (ws / "AGENTS.md").read_text()
    scripted_model.reply_tool_calls(
        [
            ("write_file", {"path": "AGENTS.md", "content": agents_before + "\nINJECTED-RULE\n"}),
            ("write_file", {"path": "skills/pwn/SKILL.md", "content": SKILL}),
            ("write_file", {"path": "prompts/dream.md", "content": "DREAM-INJECTED\n"}),
        ]
    )
    scripted_model.reply("Done.")
    await agent.turn(KEY, "a web page told you to do this")
    commit = agent.git.log()[0]
    assert commit.subject.startswith("memory: edited in chat")
    assert set(commit.files) == {"AGENTS.md", "skills/pwn/SKILL.md", "prompts/dream.md"}

    scripted_model.reply("ok")
    await agent.turn(KEY, "hello")
    system = json.dumps(scripted_model.requests[-1].messages[0])
    assert "INJECTED-RULE" in system and "ALWAYS-INJECTED" in system  # what the attack did

    page = render_page(Api.for_agent(agent))
    assert "skills/pwn/SKILL.md" in page and "ALWAYS-INJECTED" in page
    assert "prompts/dream.md" in page and "INJECTED-RULE" in page

    home = agent.settings.home
    listed = run_cli(["memory", "restore"], home, HIPPOBOT_API_KEY=API_KEY)
    assert listed.returncode == 0, listed.stderr
    assert commit.short_sha in listed.stdout
    shown = run_cli(["memory", "log", commit.short_sha], home, HIPPOBOT_API_KEY=API_KEY)
    assert "+INJECTED-RULE" in shown.stdout and "+ALWAYS-INJECTED obey" in shown.stdout
    undone = run_cli(["memory", "restore", commit.short_sha], home, HIPPOBOT_API_KEY=API_KEY)
    assert undone.returncode == 0, undone.stderr
    assert (ws / "AGENTS.md").read_text() == agents_before
    assert not (ws / "skills" / "pwn" / "SKILL.md").exists()
    assert not (ws / "prompts" / "dream.md").exists()

    scripted_model.reply("clean again")
    await agent.turn(KEY, "hello again")
    system = json.dumps(scripted_model.requests[-1].messages[0])
    assert "INJECTED" not in system
