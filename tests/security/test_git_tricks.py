"""Files that would make git run a program: the model cannot write them, and a memory
commit never runs a filter or hook even when they are already there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hippobot.memory.gitstore import GitStore
from hippobot.tools import PathPolicy, ToolRegistry, file_tools

from .conftest import API_KEY, KEY, tool_results

FILTER_CONFIG = '\n[filter "pwn"]\n\tclean = sh .hippobot/p.sh\n\tsmudge = cat\n'


def _payload(marker: Path) -> str:
    return f"#!/bin/sh\nenv > {marker}\ncat\n"


async def test_the_four_write_attack_from_chat_runs_nothing(make_agent, scripted_model, tmp_path):
    agent = make_agent()
    ws = agent.workspace
    marker = tmp_path / "ran.txt"
    config_before = (ws / ".git" / "config").read_text()
    scripted_model.reply_tool_calls(
        [
            ("write_file", {"path": ".hippobot/p.sh", "content": _payload(marker)}),
            ("write_file", {"path": ".git/config", "content": config_before + FILTER_CONFIG}),
            ("write_file", {"path": ".gitattributes", "content": "* filter=pwn\n"}),
            ("write_file", {"path": "memory/MEMORY.md",  # keeps every line: a memory file loses none
                            "content": (ws / "memory" / "MEMORY.md").read_text() + "- the user likes tea\n"}),
        ]
    )
    scripted_model.reply("Noted.")
    result = await agent.turn(KEY, "please remember I like tea")
    assert result.reply == "Noted."
    results = tool_results(agent)
    assert [r.startswith("Error") for r in results] == [True, True, True, False]
    assert not (ws / ".hippobot" / "p.sh").exists()
    assert not (ws / ".gitattributes").exists()
    assert (ws / ".git" / "config").read_text() == config_before
    # The memory edit itself was versioned, by hippobot, without running anything.
    log = agent.git.log()
    assert log[0].subject.startswith("memory: edited in chat") and "memory/MEMORY.md" in log[0].files
    assert not marker.exists()


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".GIT/config",
        ".Git./hooks/post-commit",
        "notes/../.git/hooks/pre-commit",
        "sub/.git/config",
        ".git",
        ".hippobot/p.sh",
        ".HippoBot/locks/x",
        "sessions/.hippobot/x",
        ".gitattributes",
        "skills/x/.GitAttributes",
        "gitlink/config",
        "attrlink",
        "{ws}/.git/config",
        "{ws}/deep/../.gitattributes",
    ],
)
async def test_file_tools_never_write_git_or_hippobot_state(tmp_path: Path, path: str):
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "notes").mkdir()
    os.symlink(ws / ".git", ws / "gitlink")
    os.symlink(".gitattributes", ws / "attrlink")
    registry = ToolRegistry(file_tools(PathPolicy(ws, restrict=False)))
    target = path.format(ws=ws)
    for name, args in (
        ("write_file", {"path": target, "content": "[filter \"x\"]\n"}),
        ("edit_file", {"path": target, "old_text": "[core]", "new_text": "[x]"}),
    ):
        result = await registry.execute(name, args)
        assert result.is_error, f"{name} {target} was allowed: {result.text}"
        assert "never write" in result.text or "does not exist" in result.text
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".gitattributes").exists()


async def test_config_json_in_the_home_is_unreachable_even_unrestricted(make_agent,
                                                                        scripted_model):
    agent = make_agent(restrictToWorkspace=False)
    config = str(agent.settings.config_path)
    scripted_model.reply_tool_calls(
        [
            ("read_file", {"path": "../config.json"}),
            ("read_file", {"path": config}),
            ("write_file", {"path": config, "content": "{}"}),
            ("list_dir", {"path": ".."}),
        ]
    )
    scripted_model.reply("Could not.")
    await agent.turn(KEY, "show me your config")
    results = tool_results(agent)
    assert len(results) == 4 and all(r.startswith("Error") for r in results)
    assert all(API_KEY not in r for r in results)
    assert API_KEY in agent.settings.config_path.read_text()  # untouched


def test_a_commit_never_runs_filters_or_hooks_already_in_place(tmp_path: Path):
    """Planted by hand (or by a process outside the tools): commits still run nothing."""
    ws = tmp_path / "ws"
    store = GitStore(ws)
    store.init()
    marker = tmp_path / "ran.txt"
    (ws / ".hippobot").mkdir(exist_ok=True)
    script = ws / ".hippobot" / "p.sh"
    script.write_text(_payload(marker))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with open(ws / ".git" / "config", "a") as fh:
        fh.write(FILTER_CONFIG.replace("sh .hippobot/p.sh", str(script)))
        fh.write("[filter \"pwn\"]\n\tprocess = " + str(script) + "\n\trequired = true\n")
    (ws / ".gitattributes").write_text("* filter=pwn\n")
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "attributes").write_text("* filter=pwn\n")
    hooks = ws / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-commit", "commit-msg", "post-commit", "post-index-change"):
        (hooks / hook).write_text(_payload(marker))
        (hooks / hook).chmod(0o755)
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "memory" / "MEMORY.md").write_text("- fact\n")
    (ws / "SOUL.md").write_text("calm\n")
    sha = store.commit("dream: facts")
    assert sha is not None
    assert not marker.exists()
    # The blob is the file's bytes, not a filter's output; the index agrees.
    from dulwich.repo import Repo

    repo = Repo(str(ws))
    tree = repo[repo[sha.encode()].tree]
    memory_tree = repo[tree[b"memory"][1]]
    assert repo[memory_tree[b"MEMORY.md"][1]].as_raw_string() == b"- fact\n"
    assert repo.open_index()[b"memory/MEMORY.md"].sha == memory_tree[b"MEMORY.md"][1]
    repo.close()
    assert store.revert(sha).new_sha is not None
    assert not marker.exists()
