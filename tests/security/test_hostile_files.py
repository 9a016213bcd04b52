"""Hostile or broken files in the workspace: every command gives one clear line or works
around them; never a traceback, never a hang, never a lost session or memory file.

Each case breaks one file the way a bug, a crash or another program could, then runs the
real ``hippobot`` CLI on that workspace.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hippobot.agent.agent import Agent
from hippobot.testing.cli import run_cli as shared_run_cli
from hippobot.testing.server import ScriptedServer

from .conftest import API_KEY

SESSION = "sessions/cli/direct.jsonl"
COMMANDS = [
    ["status"],
    ["context"],
    ["memory", "show"],
    ["memory", "history"],
    ["memory", "search", "tea"],
    ["agent", "-m", "hello"],
]
TIMEOUT = 30  # seconds; each command takes one or two when nothing hangs


def run_cli(args: list[str], home: Path, server: ScriptedServer) -> subprocess.CompletedProcess[str]:
    return shared_run_cli(args, home, server, timeout=TIMEOUT, HIPPOBOT_API_KEY=API_KEY)


def _deep_json(depth: int = 200_000) -> str:
    return '{"cursor": 2, "timestamp": "2026-01-01T00:00:00Z", "content": ' + "[" * depth + "]" * depth + "}"


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.symlink("/dev/zero", path)


def _append(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _replace_dir_by_file(path: Path) -> None:
    import shutil

    shutil.rmtree(path)
    path.write_text("not a folder\n")


def _replace_file_by_dir(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


CASES: dict[str, Callable[[Path], None]] = {
    "history line nested 200,000 deep": lambda ws: _append(ws / "memory/history.jsonl", _deep_json()),
    "session line nested 200,000 deep": lambda ws: _append(ws / SESSION, '{"role": "user", "content": ' + "[" * 200_000 + "]" * 200_000 + "}"),
    ".cursor with 5,000 digits": lambda ws: (ws / "memory/.cursor").write_text("9" * 5000),
    ".dream_cursor with 5,000 digits": lambda ws: (ws / "memory/.dream_cursor").write_text("9" * 5000),
    ".dream_cursor of 2^63": lambda ws: (ws / "memory/.dream_cursor").write_text(str(2**63)),
    "history cursor of 2^63": lambda ws: _append(ws / "memory/history.jsonl", json.dumps({"cursor": 2**63, "timestamp": "2026-01-01T00:00:00Z", "content": "tea"})),
    "history cursor of 5,000 digits": lambda ws: _append(ws / "memory/history.jsonl", '{"cursor": ' + "9" * 5000 + ', "timestamp": "2026-01-01T00:00:00Z", "content": "tea"}'),
    "session file is a FIFO": lambda ws: _fifo(ws / SESSION),
    "session file is /dev/zero": lambda ws: _zero(ws / SESSION),
    "MEMORY.md is a FIFO": lambda ws: _fifo(ws / "memory/MEMORY.md"),
    "MEMORY.md is /dev/zero": lambda ws: _zero(ws / "memory/MEMORY.md"),
    "SOUL.md is a FIFO": lambda ws: _fifo(ws / "SOUL.md"),
    "SOUL.md is /dev/zero": lambda ws: _zero(ws / "SOUL.md"),
    "AGENTS.md is a FIFO": lambda ws: _fifo(ws / "AGENTS.md"),
    "AGENTS.md is /dev/zero": lambda ws: _zero(ws / "AGENTS.md"),
    "SKILL.md is a FIFO": lambda ws: _fifo(ws / "skills/x/SKILL.md"),
    "SKILL.md is /dev/zero": lambda ws: _zero(ws / "skills/x/SKILL.md"),
    "history.jsonl is a folder": lambda ws: _replace_file_by_dir(ws / "memory/history.jsonl"),
    "memory/ is a file": lambda ws: _replace_dir_by_file(ws / "memory"),
    "garbage dream manifest": lambda ws: ((ws / ".hippobot/dream").mkdir(parents=True, exist_ok=True), (ws / ".hippobot/dream/manifest.json").write_text("{\x00garbage[")),
    "dream manifest of the wrong shape": lambda ws: ((ws / ".hippobot/dream").mkdir(parents=True, exist_ok=True), (ws / ".hippobot/dream/manifest.json").write_text('[5, {"a": null}]')),
    "tool_calls: [5] in a session line": lambda ws: _append(ws / SESSION, json.dumps({"role": "assistant", "content": None, "tool_calls": [5]})),
    "tool_calls of the wrong shape": lambda ws: _append(ws / SESSION, json.dumps({"role": "assistant", "content": "x", "tool_calls": [{"id": 5, "function": [1]}], "reasoning_content": 7})),
    "fresh_start past the end": lambda ws: _append(ws / SESSION, json.dumps({"_type": "meta", "last_consolidated": 0, "metadata": {"fresh_start": 10**6}})),
    "fresh_start of 2^63": lambda ws: _append(ws / SESSION, json.dumps({"_type": "meta", "last_consolidated": 2**63, "metadata": {"fresh_start": 2**64}})),
}


@pytest.fixture
def workspace(make_agent, scripted_model, scripted_server: ScriptedServer) -> Iterator[Agent]:
    """An onboarded home with one chat turn, one history entry and one memory version."""
    scripted_model.fallback = lambda request: "ok"
    agent = make_agent()
    asyncio.run(agent.turn("cli:direct", "I like tea"))
    agent.memory.append_history("the user likes tea", session_key="cli:direct")
    yield agent


def _unblock(ws: Path) -> None:
    """Give any FIFO a writer, so a reader stuck on it (a failed test) can finish."""
    for path in ws.rglob("*"):
        if path.is_fifo():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass


@pytest.mark.parametrize("case", list(CASES), ids=[c.replace(" ", "-") for c in CASES])
def test_every_command_copes_with_a_hostile_file(workspace: Agent, scripted_server, case: str):
    ws, home = workspace.workspace, workspace.settings.home
    CASES[case](ws)
    history_before = (ws / "memory/history.jsonl").read_bytes() if (ws / "memory/history.jsonl").is_file() else None
    try:
        # All commands at once, as a user's terminal, cron job and server could: each must
        # still cope on its own (and the suite spends a sixth of the time waiting).
        with ThreadPoolExecutor(len(COMMANDS)) as pool:
            runs = [(args, pool.submit(run_cli, args, home, scripted_server)) for args in COMMANDS]
        for args, run in runs:
            try:
                done = run.result()
            except subprocess.TimeoutExpired:
                pytest.fail(f"`hippobot {' '.join(args)}` hung with {case}")
            assert "Traceback" not in done.stderr, f"{args} with {case}:\n{done.stderr[-3000:]}"
            if done.returncode != 0:
                lines = [ln for ln in done.stderr.splitlines() if ln.startswith("hippobot: error") or ln.startswith("error")]
                assert lines, f"{args} with {case} failed without an error line:\n{done.stderr[-2000:]}"
                assert len(lines[-1]) < 600
    finally:
        _unblock(ws)
    if history_before is not None and (ws / "memory/history.jsonl").is_file():
        assert (ws / "memory/history.jsonl").read_bytes().startswith(history_before)


def test_a_50_mb_message_is_refused_in_one_line(workspace: Agent, scripted_server):
    ws, home = workspace.workspace, workspace.settings.home
    session_before = (ws / SESSION).read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
    env.update(HIPPOBOT_HOME=str(home), HIPPOBOT_MODEL="scripted-model",
               HIPPOBOT_API_BASE=scripted_server.base_url, HIPPOBOT_API_KEY=API_KEY)
    done = subprocess.run([sys.executable, "-m", "hippobot", "agent"], input="x" * 50_000_000 + "\n",
                          capture_output=True, text=True, env=env, timeout=TIMEOUT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the limit is 1,000,000" in done.stderr and "maxMessageChars" in done.stderr
    assert (ws / SESSION).read_bytes() == session_before  # nothing saved


def _sh(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.fixture
def small_disk_workspace(workspace: Agent, tmp_path: Path) -> Iterator[Agent]:
    """The workspace moved onto a 2 MiB tmpfs (needs mount rights: root, as in CI)."""
    import shutil

    mount = tmp_path / "disk"
    mount.mkdir()
    if not _sh("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        ws = workspace.workspace
        shutil.copytree(ws, mount / "ws", symlinks=True)
        shutil.rmtree(ws)
        os.symlink(mount / "ws", ws)
        yield workspace
    finally:
        if not _sh("umount", str(mount)):
            _sh("umount", "-l", str(mount))


def _fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as fh:  # a failed write raises here
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


@pytest.mark.parametrize("fault", ["ENOSPC", "EROFS"])
def test_restore_and_search_on_a_full_or_read_only_disk(small_disk_workspace: Agent,
                                                        scripted_server, fault: str):
    agent = small_disk_workspace
    ws, home = agent.workspace, agent.settings.home
    (ws / "memory/MEMORY.md").write_text("- the user likes tea\n")
    sha = agent.git.commit("dream: tea")
    assert sha
    memory_before = (ws / "memory/MEMORY.md").read_bytes()
    if fault == "ENOSPC":
        _fill(ws)
    else:
        assert _sh("mount", "-o", "remount,ro", str(Path(os.path.realpath(ws)).parent))
    for args in (["memory", "restore", sha[:8]], ["memory", "search", "tea"], ["memory", "reindex"]):
        done = run_cli(args, home, scripted_server)
        assert "Traceback" not in done.stderr, f"{args} on {fault}:\n{done.stderr[-3000:]}"
        if done.returncode != 0:
            assert done.stderr.strip().startswith("error:") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (ws / "memory/MEMORY.md").read_bytes() == memory_before
    assert "- the user likes tea" in (ws / "memory/MEMORY.md").read_text()


def test_a_history_append_on_a_full_disk_leaves_no_partial_line(small_disk_workspace: Agent):
    from hippobot.errors import StorageError

    agent = small_disk_workspace
    history = agent.workspace / "memory/history.jsonl"
    before = history.read_bytes()
    _fill(agent.workspace)
    os.truncate(agent.workspace / "filler", (agent.workspace / "filler").stat().st_size - 2000)
    with pytest.raises(StorageError):
        agent.memory.append_history("y" * 20_000, session_key="cli:direct")
    assert history.read_bytes() == before
