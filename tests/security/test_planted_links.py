"""Links planted in the workspace are never followed out of it by hippobot's own readers.

The sandbox hides hippobot's home from a command, but hippobot reads the workspace outside
the sandbox: a command that runs ``ln -sf ~/.hippobot/config.json AGENTS.md`` used to put
the whole config, key included, into the next system prompt. Here a sandboxed ``exec``
plants the links (the way a steered model would), then every reader is tried: the system
prompt the model receives, ``hippobot context --full``, ``memory show``, ``memory search``,
the memory page, Dream, sessions, history, the recall index and the nanobot import.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from hippobot.agent.api import Api
from hippobot.errors import StorageError
from hippobot.server.web import render_page
from hippobot.testing.cli import run_cli

from .conftest import API_KEY, KEY

SECRET = "OUTSIDE-SECRET-7731"
CONFIG_MARK = '"providers"'


def leaked(text: str) -> list[str]:
    """What of the config, the outside file or the git settings ``text`` holds."""
    marks = (API_KEY, CONFIG_MARK, SECRET, "repositoryformatversion")
    return [mark for mark in marks if mark in text]


async def plant(agent, scripted_model, links: dict[str, str]) -> str:
    """``ln -sf`` each link from inside the agent's own ``exec`` (sandboxed where bwrap works)."""
    lines = [f"mkdir -p {shlex.quote(os.path.dirname(rel) or '.')} && ln -sfn {shlex.quote(target)} "
             f"{shlex.quote(rel)}" for rel, target in links.items()]
    scripted_model.reply_tool_call("exec", {"command": " && ".join(lines) + " && echo planted"})
    scripted_model.reply("Tidied up.")
    await agent.turn(KEY, "tidy up the workspace")
    result = [m for m in scripted_model.requests[-1].messages if m["role"] == "tool"][-1]["content"]
    assert "planted" in result, result
    return result


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.md"
    secret.parent.mkdir()
    secret.write_text(f"# Secret\n\n- {SECRET}\n")
    return secret


async def test_no_prompt_or_memory_reader_follows_a_planted_link(
    make_agent, scripted_model, scripted_server, outside
):
    agent = make_agent(exec={"sandbox": "auto"})
    ws, home = agent.workspace, agent.settings.home
    config = str(agent.settings.config_path)
    (ws / "notes").mkdir()
    (ws / "notes" / "soul.md").write_text("# Soul\n\nBe terse; inside-link-ok.\n")
    await plant(agent, scripted_model, {
        "AGENTS.md": config,                       # absolute, out of the workspace
        "USER.md": "../config.json",               # relative, out of the workspace
        "memory/MEMORY.md": config,
        "memory/notes.md": str(outside),           # indexed by recall
        "skills/leak/SKILL.md": str(outside),
        "skills/git/SKILL.md": "../../.git/config",  # inside, but into .git
        "prompts/dream.md": config,
        "SOUL.md": "notes/soul.md",                # inside the workspace: still followed
    })

    scripted_model.reply("Hello.")
    await agent.turn(KEY, "hello")
    system = scripted_model.requests[-1].messages[0]["content"]
    assert leaked(system) == [], system
    assert "inside-link-ok" in system  # a link that stays inside the workspace works

    for args in (["context", "--full"], ["memory", "show"], ["memory", "search", "OUTSIDE"],
                 ["memory", "search", "providers apiKey"], ["status"]):
        done = run_cli(args, home, scripted_server, HIPPOBOT_API_KEY=API_KEY)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert leaked(done.stdout) == [], (args, done.stdout)

    page = render_page(Api.for_agent(agent), query="OUTSIDE providers")
    assert leaked(page) == [], page

    agent.memory.append_history("- [permanent] User drinks green tea", session_key=KEY)
    scripted_model.reply("[USER] drinks green tea")
    scripted_model.reply("No tool calls: apply the findings.")
    result = await agent.dream.run()
    assert result.status == "done", result.describe()
    dream_requests = json.dumps([r.messages for r in scripted_model.requests[-2:]])
    assert leaked(dream_requests) == []
    # What the links pointed at is untouched; Dream replaced the link it wrote with a file.
    assert CONFIG_MARK in Path(config).read_text() and SECRET in outside.read_text()
    assert not (ws / "USER.md").is_symlink() and "drinks green tea" in (ws / "USER.md").read_text()


def _victim_workspace(root: Path) -> tuple[Path, Path]:
    """Another workspace with a 12-line session and a history entry nobody else may see."""
    session = root / "sessions" / "api" / "diary.jsonl"
    session.parent.mkdir(parents=True)
    lines = [{"_type": "session", "format": 1, "key": "api:diary", "created_at": "2026-01-01T00:00:00+00:00"}]
    lines += [{"role": "user" if i % 2 == 0 else "assistant", "content": f"VICTIM-TALK {i}"} for i in range(11)]
    session.write_text("".join(json.dumps(r) + "\n" for r in lines))
    history = root / "memory" / "history.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text(json.dumps({"cursor": 1, "timestamp": "2026-01-01 10:00", "content": "VICTIM-HISTORY"}) + "\n")
    return session, history


async def test_sessions_history_and_the_index_never_read_or_append_through_a_link(
    make_agent, scripted_model, scripted_server, tmp_path
):
    agent = make_agent(exec={"sandbox": "auto"})
    ws, home = agent.workspace, agent.settings.home
    session, history = _victim_workspace(tmp_path / "victim")
    before = session.read_bytes(), history.read_bytes()
    await plant(agent, scripted_model, {
        "sessions/cli/stolen.jsonl": str(session),
        "memory/history.jsonl": str(history),
    })
    calls = len(scripted_model.requests)

    with pytest.raises(StorageError, match="symbolic link"):
        await agent.turn("cli:stolen", "what did we talk about?")
    assert len(scripted_model.requests) == calls  # nothing of the victim went to the model
    with pytest.raises(StorageError, match="symbolic link"):
        agent.memory.append_history("a summary", session_key=KEY)
    assert (session.read_bytes(), history.read_bytes()) == before  # 12 lines, 1 entry

    listed = run_cli(["sessions", "list"], home, scripted_server, HIPPOBOT_API_KEY=API_KEY)
    assert listed.returncode == 0 and "stolen" not in listed.stdout, listed.stdout + listed.stderr
    for args in (["sessions", "show", "cli:stolen"], ["memory", "history"]):
        shown = run_cli(args, home, scripted_server, HIPPOBOT_API_KEY=API_KEY)
        assert shown.returncode != 0 and "Traceback" not in shown.stderr, shown.stderr
        assert "symbolic link" in shown.stderr and "VICTIM" not in shown.stdout + shown.stderr

    # A folder on the way replaced by a link: the index never reads through it.
    os.unlink(ws / "memory" / "history.jsonl")
    (ws / "memory").rename(ws / "memory-old")
    os.symlink(history.parent, ws / "memory")
    found = run_cli(["memory", "search", "VICTIM"], home, scripted_server, HIPPOBOT_API_KEY=API_KEY)
    assert "VICTIM" not in found.stdout and "Traceback" not in found.stderr, found.stdout
    assert (session.read_bytes(), history.read_bytes()) == before


def test_import_does_not_follow_a_link_out_of_nanobots_home(make_agent, tmp_path):
    from hippobot.migrate.nanobot import import_nanobot

    agent = make_agent()
    nanobot = tmp_path / "nanobot"
    (nanobot / "workspace" / "memory").mkdir(parents=True)
    (nanobot / "workspace" / "SOUL.md").write_text("# Soul\n\nnanobot's own soul.\n")
    os.symlink(agent.settings.config_path, nanobot / "workspace" / "AGENTS.md")
    os.symlink(agent.settings.config_path, nanobot / "workspace" / "memory" / "MEMORY.md")
    _, report = import_nanobot(nanobot, agent.settings)
    lines = "\n".join(report.lines())
    assert "AGENTS.md (a symbolic link" in lines and "SOUL.md" in lines
    for name in ("AGENTS.md", "memory/MEMORY.md"):
        assert leaked((agent.workspace / name).read_text()) == [], name
    assert "nanobot's own soul" in (agent.workspace / "SOUL.md").read_text()
