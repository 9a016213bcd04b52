"""What the model receives, as the user shapes it: personality files, projects, images."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest

from hippobot.agent.agent import Agent
from hippobot.agent.api import Api
from hippobot.errors import UserError
from hippobot.session.keys import key_to_relpath


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"\x00\xff\x00\x00"  # one red pixel
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


async def test_an_edit_to_soul_shows_in_the_very_next_turn(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("one").reply("two")
    await agent.turn("cli:direct", "hi")
    assert "pirate" not in scripted_model.requests[0].messages[0]["content"]
    (agent.workspace / "SOUL.md").write_text("# Soul\nAlways talk like a pirate.\n")
    await agent.turn("cli:direct", "hi again")
    assert "Always talk like a pirate." in scripted_model.requests[1].messages[0]["content"]


async def test_a_project_replaces_bootstrap_files_and_hosts_file_tools(make_settings, scripted_model, tmp_path):
    settings = make_settings()
    (settings.workspace / "AGENTS.md").write_text("# Agent rules\nWORKSPACE RULES\n")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "AGENTS.md").write_text("# Project rules\nPROJECT RULES\n")
    agent = Agent(settings, project=project)
    scripted_model.reply_tool_call("write_file", {"path": "out.txt", "content": "hello"})
    scripted_model.reply("written")
    await agent.turn("cli:direct", "write out.txt")
    system = scripted_model.requests[0].messages[0]["content"]
    assert "PROJECT RULES" in system and "WORKSPACE RULES" not in system
    assert (project / "out.txt").read_text() == "hello"
    assert not (settings.workspace / "out.txt").exists()
    # Memory and sessions stay in the agent workspace.
    assert (settings.workspace / key_to_relpath("cli:direct")).exists()


async def test_images_are_sent_as_blocks_and_stored_as_paths(make_agent, scripted_model, tmp_path):
    agent = make_agent()
    image = tmp_path / "dot.png"
    image.write_bytes(tiny_png())
    scripted_model.reply("A red dot.").reply("Still a red dot.")
    await agent.turn("cli:direct", "What is this?", media=[str(image)])
    await agent.turn("cli:direct", "And now?")
    first_user = scripted_model.requests[0].messages[-1]
    blocks = first_user["content"]
    assert blocks[0]["type"] == "image_url"
    assert blocks[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(blocks[0]["image_url"]["url"].split(",", 1)[1]) == tiny_png()
    # Replayed byte-identically on the next turn (prompt cache), from the stored path.
    replayed = scripted_model.requests[1].messages[1]
    assert json.dumps(replayed, sort_keys=True) == json.dumps(first_user, sort_keys=True)
    raw = (agent.workspace / key_to_relpath("cli:direct")).read_text()
    assert "base64" not in raw and str(image) in raw


async def test_a_non_image_is_refused_before_anything_is_saved(make_agent, tmp_path):
    agent = make_agent()
    fake = tmp_path / "notes.png"
    fake.write_text("just text")
    with pytest.raises(UserError, match="not an image"):
        await agent.turn("cli:direct", "look", media=[str(fake)])
    assert not (agent.workspace / key_to_relpath("cli:direct")).exists()


async def test_context_command_lists_sections_with_tokens(make_agent, scripted_model):
    agent = make_agent()
    (agent.workspace / "USER.md").write_text("# User\nName: Ada\n")
    text = (await Api.for_agent(agent).handle("cli:direct", "/context")).reply
    for name in ("identity", "USER.md", "tool contract", "tool schemas", "history replay", "total"):
        assert name in text
    assert scripted_model.requests == []


async def test_recent_history_shares_durable_facts_unless_chats_are_kept_apart(make_agent, scripted_model):
    agent = make_agent()
    agent.memory.append_history(
        "- [permanent] Alice likes tea\n- [ephemeral] Alice is busy today", session_key="telegram:alice"
    )
    agent.memory.append_history("- [permanent] Bob likes coffee", session_key="cli:direct")
    scripted_model.reply("ok")
    await agent.turn("cli:direct", "hi")
    system = scripted_model.requests[0].messages[0]["content"]
    # another chat's durable facts reach this one; its passing remarks do not
    assert "Bob likes coffee" in system and "Alice likes tea" in system
    assert "busy today" not in system

    # settings are frozen: the next process, configured otherwise
    agent = type(agent)(agent.settings.with_defaults(see_other_sessions=False))
    scripted_model.reply("ok")
    await agent.turn("cli:direct", "hi again")
    system = scripted_model.requests[-1].messages[0]["content"]
    assert "Bob likes coffee" in system and "Alice likes tea" not in system
