"""Dream's tools reach SOUL.md, USER.md and memory/MEMORY.md, and nothing else.

The edit phase is scripted to try everything else: the archive, the cursors, AGENTS.md, a
session, paths out of the workspace, the live files by absolute path (Dream edits staged
copies), tools it was not given, and a memory file that is a symlink to a file elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from hippobot.agent.agent import Agent

KEY = "cli:direct"


def _snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part in skip for part in p.relative_to(root).parts)
    }


def _pending_entry(agent: Agent) -> None:
    agent.memory.append_history("- [permanent] User drinks green tea", session_key=KEY)


async def _dream_with_edits(agent: Agent, model, calls: list[tuple[str, dict]]):
    model.reply("[USER] drinks green tea")
    model.reply_tool_calls(calls)
    model.reply("Applied what I was allowed to.")
    result = await agent.dream.run()
    assert result.status == "done", result.describe()
    return result


def _edit_results(model) -> list[str]:
    request = model.requests[2]  # phase 2's second call carries the tool results
    return [m["content"] for m in request.messages if m["role"] == "tool"]


async def test_dream_edits_only_the_three_memory_files(make_agent, scripted_model, tmp_path):
    agent = make_agent()
    ws = agent.workspace
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    (ws / "sessions" / "cli").mkdir(parents=True)
    (ws / "sessions" / "cli" / "direct.jsonl").write_text(
        '{"_type":"session","format":1,"key":"cli:direct","created_at":"2026-01-01T00:00:00+00:00"}\n'
    )
    (ws / "memory" / ".dream_cursor").write_text("0")
    user_before = (ws / "USER.md").read_text()
    anchor = user_before.strip().splitlines()[-1]
    hostile = {"old_text": "a", "new_text": "PWNED", "replace_all": True}
    calls = [
        ("edit_file", {"path": "memory/history.jsonl", **hostile}),
        ("edit_file", {"path": "memory/.dream_cursor", "old_text": "0", "new_text": "999"}),
        ("edit_file", {"path": "memory/.cursor", **hostile}),
        ("edit_file", {"path": "AGENTS.md", **hostile}),
        ("edit_file", {"path": "sessions/cli/direct.jsonl", **hostile}),
        ("edit_file", {"path": "../outside.txt", **hostile}),
        ("edit_file", {"path": "../../../../outside.txt", **hostile}),
        ("edit_file", {"path": str(outside), **hostile}),
        ("edit_file", {"path": str(ws / "USER.md"), **hostile}),
        ("edit_file", {"path": str(ws / "memory" / "history.jsonl"), **hostile}),
        ("edit_file", {"path": "memory/MEMORY.md/../../AGENTS.md", **hostile}),
        ("edit_file", {"path": "memory/../../outside.txt", **hostile}),
        ("read_file", {"path": "memory/history.jsonl"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("write_file", {"path": "USER.md", "content": "everything replaced"}),
        ("write_file", {"path": "AGENTS.md", "content": "new rules"}),
        ("exec", {"command": "echo PWNED >> AGENTS.md"}),
        ("list_dir", {"path": "."}),
        ("edit_file", {"path": "USER.md", "old_text": anchor,
                       "new_text": anchor + "\n- Drinks green tea"}),
    ]
    _pending_entry(agent)
    # history.jsonl changes too: once processed, the entry moves to the archive file
    history_files = ("history.jsonl", "history.archive.jsonl")
    protected = _snapshot(ws, skip=(".git", ".hippobot", "USER.md", ".dream_cursor", *history_files))
    entry = (ws / "memory" / "history.jsonl").read_bytes()
    await _dream_with_edits(agent, scripted_model, calls)

    results = _edit_results(scripted_model)
    assert len(results) == len(calls)
    for (name, args), text in zip(calls[:-1], results[:-1], strict=True):
        assert text.startswith("Error"), f"{name} {args.get('path', args)} was allowed: {text}"
    assert results[-1].startswith("Edited USER.md")
    assert _snapshot(ws, skip=(".git", ".hippobot", "USER.md", ".dream_cursor", *history_files)) == protected
    assert (ws / "memory" / "history.archive.jsonl").read_bytes() == entry
    assert outside.read_text() == "not yours\n"
    assert "- Drinks green tea" in (ws / "USER.md").read_text()
    assert "PWNED" not in (ws / "USER.md").read_text()
    assert (ws / "memory" / ".dream_cursor").read_text().strip() == str(agent.memory.last_cursor())


async def test_a_memory_file_symlinked_elsewhere_is_never_read_or_written_through(
    make_agent, scripted_model, tmp_path
):
    """A chat model with ``exec`` can turn USER.md into a link to, say, ~/.bashrc; Dream must
    then neither show that file to the model nor write memory text into it."""
    import json

    agent = make_agent()
    ws = agent.workspace
    target = tmp_path / "shared-profile.md"
    target.write_text("# User\n\n- Likes maps\n")
    (ws / "USER.md").unlink()
    os.symlink(target, ws / "USER.md")
    _pending_entry(agent)
    scripted_model.reply("[USER] drinks green tea")
    scripted_model.reply("No tool calls: apply the findings.")  # Dream's text path appends them
    result = await agent.dream.run()
    assert result.status == "done", result.describe()
    assert "Likes maps" not in json.dumps([r.messages for r in scripted_model.requests])
    # The finding landed in the workspace's own USER.md; the file the link pointed at is as it was.
    assert target.read_text() == "# User\n\n- Likes maps\n"
    assert not (ws / "USER.md").is_symlink()
    assert "drinks green tea" in (ws / "USER.md").read_text()
