"""Disk full and read-only workspaces: a clear error, never a truncated file.

Where the machine allows it (root with mount rights, as in CI), the workspace lives on a
real small tmpfs that is filled up, then remounted read-only. Everywhere, the same is
injected as ENOSPC / EROFS from ``os.write`` and ``os.open`` for paths under the
workspace, the system calls the session and memory stores write through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.errors import HippobotError
from hippobot.memory.gitstore import GitStore
from hippobot.providers.retry import RetryPolicy

from .child_driver import MEMORY_SEED, TOOLS_FLAG, marker, write_config
from .conftest import model_env
from .harness import check_workspace

FILLER = "We planned the vegetable beds, the compost rota and the rain barrels. " * 8


# --- setting up -------------------------------------------------------------------------------


def _run(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, or a skip where this machine does not allow mounting one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if not _run("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)):
        pytest.skip("cannot mount a tmpfs here (needs root); the injected-error tests cover it")
    try:
        yield mount
    finally:
        if not _run("umount", str(mount)):
            _run("umount", "-l", str(mount))


def _agent(home: Path, base_url: str) -> Agent:
    write_config(home)
    settings = load_settings(model_env(home, base_url))
    onboard(settings)
    (settings.workspace / "memory" / "MEMORY.md").write_text(MEMORY_SEED, encoding="utf-8")
    GitStore(settings.workspace).commit("seed")
    agent = Agent(settings)
    agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
    return agent


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` until at most ``leave`` bytes are free; returns the filler file."""
    filler = disk / "filler"
    with contextlib.suppress(FileNotFoundError):
        filler.unlink()
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as fh:
        try:
            fh.write(b"\0" * max(0, free - leave))
            fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


class Conversation:
    """Drives turns, consolidation and Dream, and keeps the journal the checks read."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.journal: list[dict] = []
        self.n = 0
        self.errors: list[str] = []
        self.successes = 0

    async def turn(self, key: str = "cli:direct", *, tools: bool = False) -> None:
        tag = marker(f"disk-{self.n}")
        self.n += 1
        text = f"{tag}\nFACT: the user noted {tag}\n{TOOLS_FLAG if tools else ''}\n{FILLER}"
        result = await self.agent.turn(key, text)
        self.journal.append({"op": "turn", "state": "done", "key": key, "marker": tag,
                             "reply": result.reply})

    async def attempt(self, action: Callable[[], object]) -> None:
        """Run one step; it must succeed or fail with one clear line, never anything else."""
        try:
            await action()  # type: ignore[misc]
            self.successes += 1
        except HippobotError as exc:
            text = str(exc)
            assert "\n" not in text, text
            self.errors.append(text)
        await self.agent.jobs.drain()

    def check(self, *, settled: bool = False) -> None:
        found = check_workspace(self.agent.workspace, self.journal, settled=settled)
        assert not found.problems, "\n".join(found.problems)

    async def dream(self) -> None:
        result = await self.agent.dream.run()
        if result.status == "failed":
            raise AssertionError(f"Dream reported a failure as a model failure: {result.error}")

    async def consolidate(self) -> None:
        session = self.agent.sessions.get("cli:direct")
        await self.agent.consolidator.archive_until(session, len(session.messages))


async def _steps_under_pressure(talk: Conversation, *, check: bool = True) -> None:
    for step in (lambda: talk.turn(), lambda: talk.turn(tools=True), talk.consolidate,
                 talk.dream):
        await talk.attempt(step)
        if check:
            talk.check()


async def _recovers(talk: Conversation) -> None:
    for _ in range(3):
        await talk.turn()
    await talk.agent.jobs.drain()
    await talk.consolidate()
    while (await talk.agent.dream.run()).status != "nothing":
        pass
    talk.check(settled=True)


# --- a real full disk -------------------------------------------------------------------------


@pytest.mark.parametrize("leave", [0, 3000, 12_000, 40_000])
async def test_a_full_disk_gives_clear_errors_and_no_torn_files(small_disk, workspace_model,
                                                                leave):
    _model, server = workspace_model
    talk = Conversation(_agent(small_disk / "home", server.base_url))
    for _ in range(4):
        await talk.turn()
    filler = _fill(small_disk, leave)
    for _ in range(3):
        await _steps_under_pressure(talk)
    if leave == 0:
        assert talk.errors, "a disk with no space left accepted every write"
    assert all("No space left on device" in e or "disk is full" in e for e in talk.errors), talk.errors
    filler.unlink()
    await _recovers(talk)


async def test_a_read_only_workspace_refuses_writes_clearly_then_recovers(small_disk,
                                                                        workspace_model):
    _model, server = workspace_model
    talk = Conversation(_agent(small_disk / "home", server.base_url))
    for _ in range(4):
        await talk.turn()
    await talk.agent.jobs.drain()
    # Recall before answering keeps the search index open for writing, and Linux refuses to
    # remount a file system read-only under an open writer (a failing disk does not ask).
    talk.agent.recall.close()
    before = {p: p.read_bytes() for p in small_disk.rglob("*") if p.is_file()}
    assert _run("mount", "-o", "remount,ro", str(small_disk))
    try:
        await _steps_under_pressure(talk, check=False)  # the checker's reads need locks
    finally:
        assert _run("mount", "-o", "remount,rw", str(small_disk))
    assert len(talk.errors) == 4 and talk.successes == 0, talk.errors
    assert all("Read-only file system" in e for e in talk.errors), talk.errors
    assert {p: p.read_bytes() for p in small_disk.rglob("*") if p.is_file()} == before
    talk.check()
    await _recovers(talk)


async def test_a_read_only_workspace_can_still_be_read(small_disk, workspace_model):
    _model, server = workspace_model
    talk = Conversation(_agent(small_disk / "home", server.base_url))
    await talk.turn()
    reader = Agent(talk.agent.settings)  # a new process: nothing cached
    talk.agent.recall.close()  # an open writer would keep the remount from happening
    assert _run("mount", "-o", "remount,ro", str(small_disk))
    try:
        session = reader.sessions.get("cli:direct")
        assert len(session.messages) == 2
        reader.prompts.prepare(session)  # what `hippobot context` shows
    finally:
        assert _run("mount", "-o", "remount,rw", str(small_disk))


# --- injected errors (every machine) ------------------------------------------------------------


@contextlib.contextmanager
def _refusing_writes(monkeypatch: pytest.MonkeyPatch, root: Path, code: int) -> Iterator[None]:
    """``os.write`` to, and ``os.open`` for writing of, files under ``root`` fail with ``code``."""
    real_write, real_open = os.write, os.open
    prefix = str(root.resolve()) + os.sep
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def under_root(fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(prefix)
        except OSError:
            return False

    def write(fd: int, data) -> int:  # type: ignore[no-untyped-def]
        if under_root(fd):
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    def open_(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if code == errno.EROFS and flags & writing and os.path.abspath(path).startswith(prefix):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", write)
        patch.setattr(os, "open", open_)
        yield


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
async def test_injected_write_errors_are_clear_and_leave_files_whole(
    tmp_path, workspace_model, monkeypatch, code
):
    _model, server = workspace_model
    talk = Conversation(_agent(tmp_path / "home", server.base_url))
    for _ in range(6):
        await talk.turn()
    await talk.agent.jobs.drain()
    workspace = talk.agent.workspace
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file() and ".git" not in p.parts}
    with _refusing_writes(monkeypatch, workspace, code):
        await _steps_under_pressure(talk, check=code == errno.ENOSPC)
    talk.check()
    assert len(talk.errors) >= 2, talk.errors
    assert all(os.strerror(code) in e for e in talk.errors), talk.errors
    for path, data in before.items():  # appended to or replaced, never cut short
        if path.exists() and path.suffix in (".jsonl", ".md"):
            assert path.read_bytes().startswith(data) or path.name == "MEMORY.md", path
    await _recovers(talk)
