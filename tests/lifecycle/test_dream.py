"""Dream as a user relies on it: facts reach the durable files, every change is a commit
you can inspect and undo, and a failed run changes nothing."""

from __future__ import annotations

import json
import subprocess

from hippobot.agent.api import Api
from hippobot.config.schema import DreamConfig
from hippobot.lifecycle.dream import parse_findings
from hippobot.lifecycle.versions import describe_log, describe_restore, list_versions
from hippobot.memory.history import HistorySource


def plant_history(agent, *facts: str, key: str = "cli:direct") -> None:
    for i, fact in enumerate(facts):
        agent.memory.append_history(fact, session_key=key, source=HistorySource(key, i * 2, i * 2 + 2))


def script_dream(model, findings: str, edits: list[tuple[str, str, str]]) -> None:
    """Phase 1 answers ``findings``; phase 2 makes ``edits`` (path, old, new), then stops."""
    model.reply(findings)
    for path, old, new in edits:
        model.reply_tool_call("edit_file", {"path": path, "old_text": old, "new_text": new})
    model.reply("Applied the findings.")


def git_log(workspace) -> list[str]:
    from hippobot.memory.gitstore import GitStore

    return [c.subject for c in GitStore(workspace).log(limit=50)]


async def test_dream_writes_facts_commits_and_restore_undoes_exactly_that(make_agent, scripted_model):
    agent = make_agent()
    ws = agent.workspace
    plant_history(agent, "- [permanent] User has a cat named Luna", "- [durable] Project Apollo uses PostgreSQL 16")
    script_dream(
        scripted_model,
        "[USER] Has a cat named Luna\n[MEMORY] Project Apollo uses PostgreSQL 16",
        [
            ("USER.md", "- Name:", "- Name:\n- Has a cat named Luna"),
            ("memory/MEMORY.md", "### Projects and context\n", "### Projects and context\n- Project Apollo uses PostgreSQL 16\n"),
        ],
    )
    result = await agent.dream.run()
    assert result.status == "done", result.describe()
    assert set(result.files) == {"USER.md", "memory/MEMORY.md"}
    assert "Has a cat named Luna" in (ws / "USER.md").read_text()
    assert agent.memory.dream_cursor() == agent.memory.last_cursor() == 2
    assert agent.memory.pending_count() == 0
    dream_commit = git_log(ws)[0]
    assert dream_commit.startswith("dream: ") and "2 change(s)" in dream_commit

    # A brand-new session's prompt carries the facts.
    scripted_model.reply("Luna, of course.")
    await agent.turn("cli:fresh", "What is my cat called?")
    system = scripted_model.requests[-1].messages[0]["content"]
    assert "Has a cat named Luna" in system and "PostgreSQL 16" in system

    # The diff is inspectable.
    log_text = describe_log(agent.git, None)
    assert "+- Has a cat named Luna" in log_text
    sha = agent.git.log(limit=1, prefix="dream:")[0].short_sha

    # A later manual edit survives the restore of the Dream commit.
    user = ws / "USER.md"
    user.write_text(user.read_text().replace("- Languages:", "- Languages: English, Welsh"))
    text = describe_restore(agent.git, sha)
    assert "Undid" in text
    after = user.read_text()
    assert "Has a cat named Luna" not in after
    assert "English, Welsh" in after
    assert "PostgreSQL 16" not in (ws / "memory/MEMORY.md").read_text()
    assert agent.memory.dream_cursor() == 2  # not rewound: what was undone stays undone
    assert git_log(ws)[0].startswith("restore: undo")
    assert "restore: undo" in list_versions(agent.git)


async def test_nothing_pending_says_so_and_changes_nothing(make_agent, scripted_model):
    agent = make_agent()
    before = git_log(agent.workspace)
    result = await agent.dream.run()
    assert result.status == "nothing"
    assert "no history entries" in result.describe()
    assert git_log(agent.workspace) == before
    assert scripted_model.requests == []


async def test_dry_run_prints_findings_and_edits_nothing(make_agent, scripted_model):
    agent = make_agent()
    plant_history(agent, "- [permanent] User is vegetarian")
    scripted_model.reply("[USER] Is vegetarian")
    before = (agent.workspace / "USER.md").read_text()
    result = await agent.dream.run(dry_run=True)
    assert result.status == "dry-run"
    assert "[USER] Is vegetarian" in result.describe()
    assert (agent.workspace / "USER.md").read_text() == before
    assert agent.memory.dream_cursor() == 0


async def test_a_failed_run_leaves_files_and_cursor_untouched(make_agent, scripted_model):
    agent = make_agent()
    plant_history(agent, "- [permanent] User's dog is Rex")
    scripted_model.reply("[USER] Has a dog named Rex")
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "- Name:", "new_text": "- Name:\n- Dog: Rex"})
    for _ in range(4):
        scripted_model.fail(500)  # the model dies half-way through the edit phase
    before = (agent.workspace / "USER.md").read_text()
    result = await agent.dream.run()
    assert result.status == "failed"
    assert (agent.workspace / "USER.md").read_text() == before
    assert agent.memory.dream_cursor() == 0
    assert agent.memory.pending_count() == 1


async def test_a_killed_run_before_its_commit_point_is_discarded(make_agent):
    agent = make_agent()
    dream = agent.dream
    dream._stage()
    (dream.staged / "USER.md").write_text("half-edited")
    # The process dies here: no manifest was written. The next run starts clean.
    assert dream.recover() == ((), None)
    assert "half-edited" not in (agent.workspace / "USER.md").read_text()


async def test_a_killed_run_after_its_commit_point_is_rolled_forward(make_agent):
    agent = make_agent()
    plant_history(agent, "- [permanent] fact")
    dream = agent.dream
    dream._stage()
    (dream.staged / "USER.md").write_text((agent.workspace / "USER.md").read_text() + "- Rolled forward\n")
    dream.manifest.write_text(json.dumps({"cursor": 1, "time": "2026-11-29 10:00"}))
    files, sha = dream.recover()
    assert files == ("USER.md",) and sha
    assert "Rolled forward" in (agent.workspace / "USER.md").read_text()
    assert agent.memory.dream_cursor() == 1


async def test_edits_outside_the_three_files_are_refused(make_agent, scripted_model):
    agent = make_agent()
    plant_history(agent, "- [permanent] anything")
    scripted_model.reply("[MEMORY] anything")
    scripted_model.reply_tool_call("edit_file", {"path": "AGENTS.md", "old_text": "#", "new_text": "pwned"})
    scripted_model.reply_tool_call("edit_file", {"path": "memory/history.jsonl", "old_text": "{", "new_text": "x"})
    scripted_model.reply_tool_call("edit_file", {"path": "../../etc/passwd", "old_text": "root", "new_text": "x"})
    scripted_model.reply_tool_call("write_file", {"path": "USER.md", "content": "rewritten"})
    scripted_model.reply("done")
    agents_before = (agent.workspace / "AGENTS.md").read_text()
    history_before = (agent.workspace / "memory/history.jsonl").read_text()
    result = await agent.dream.run()
    assert result.status == "done"
    assert (agent.workspace / "AGENTS.md").read_text() == agents_before
    # the entry, untouched by the refused edit, is archived once processed
    assert (agent.workspace / "memory/history.archive.jsonl").read_text() == history_before
    assert "rewritten" not in (agent.workspace / "USER.md").read_text()
    tool_results = [m for m in scripted_model.requests[-1].messages if m["role"] == "tool"]
    assert len(tool_results) == 4 and all("Error" in m["content"] for m in tool_results)
    # none of the model's edits applied; the finding reaches MEMORY.md through the code
    assert "- anything" in (agent.workspace / "memory/MEMORY.md").read_text()
    assert agent.memory.pending_count() == 0 and not result.held


async def test_unformatted_analysis_of_passing_remarks_loses_nothing(make_agent, scripted_model, caplog):
    agent = make_agent()
    plant_history(agent, "- [ephemeral] it rained")
    scripted_model.reply("Sure! Here is what I think about the weather.")
    scripted_model.reply("Still just prose.")  # asked once more
    result = await agent.dream.run()
    assert result.status == "done" and not result.files
    assert "followed no known format" in caplog.text
    assert agent.memory.pending_count() == 0  # no durable fact in it: nothing to keep


async def test_dream_commands_in_chat(make_agent, scripted_model):
    agent = make_agent()
    assert "Nothing to dream about" in (await Api.for_agent(agent).handle("cli:direct", "/dream")).reply
    assert "built-in guide" in (await Api.for_agent(agent).handle("cli:direct", "/dream-prompt")).reply
    assert "Wrote the default Dream guide" in (await Api.for_agent(agent).handle("cli:direct", "/dream-prompt init")).reply
    assert (agent.workspace / "prompts" / "dream.md").exists()
    assert "custom guide" in (await Api.for_agent(agent).handle("cli:direct", "/dream-prompt")).reply
    assert "init: memory store" in (await Api.for_agent(agent).handle("cli:direct", "/dream-restore")).reply
    unknown = (await Api.for_agent(agent).handle("cli:direct", "/dream-restore deadbeef")).reply
    assert "recent versions" in unknown or "Memory versions" in unknown


async def test_a_broken_git_repo_keeps_chat_working(make_agent, scripted_model):
    agent = make_agent()
    (agent.workspace / ".git" / "HEAD").write_text("garbage")
    scripted_model.reply("still chatting")
    assert (await agent.turn("cli:direct", "hi")).reply == "still chatting"
    assert "off" in describe_log(agent.git, None)


def test_finding_parser():
    findings, valid = parse_findings("[USER] Lives in Osaka, not Tokyo\n[SKIP] weather\nnoise\n[FILE-REMOVE] USER.md: old")
    assert valid
    assert findings == ["[USER] Lives in Osaka, not Tokyo", "[FILE-REMOVE] USER.md: old"]
    assert parse_findings("no format at all") == ([], False)


def test_git_log_works_with_a_plain_git_client_when_present(tmp_path):
    import shutil

    from hippobot.memory.gitstore import GitStore

    if shutil.which("git") is None:
        return  # the dulwich path is covered above; this only cross-checks a real client
    GitStore(tmp_path).init()
    out = subprocess.run(["git", "-C", str(tmp_path), "log", "--format=%an <%ae> %s"], capture_output=True, text=True)
    assert out.stdout.strip() == "hippobot <hippobot@dream> init: memory store"


async def test_remembering_on_request_is_versioned_at_once(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply_tool_call(
        "edit_file",
        {"path": "memory/MEMORY.md", "old_text": "### Preferences\n", "new_text": "### Preferences\n- Vegetarian\n"},
    )
    scripted_model.reply("I'll remember that you're vegetarian.")
    await agent.turn("cli:direct", "Remember that I'm vegetarian.")
    assert "- Vegetarian" in (agent.workspace / "memory/MEMORY.md").read_text()
    latest = agent.git.log(limit=1)[0]
    assert latest.subject == "memory: edited in chat (cli:direct)"
    assert "memory/MEMORY.md" in latest.files


async def test_a_looping_dream_is_stopped_by_its_token_budget(make_agent, scripted_model, caplog):
    agent = make_agent(dream=DreamConfig(max_tokens_per_run=1000, batch_size=1))
    plant_history(agent, "- [permanent] a", "- [permanent] b")
    scripted_model.usage(prompt_tokens=900, completion_tokens=200)
    scripted_model.reply("[USER] a")
    result = await agent.dream.run()
    assert result.status == "stopped"
    assert "token budget" in result.describe()
    assert agent.memory.dream_cursor() == 0  # the batch never completed
