"""File tools stay inside the workspace: `..`, absolute paths and symlinks cannot escape."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hippobot.errors import ToolError
from hippobot.tools import PathPolicy, ToolRegistry, file_tools


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    workspace = tmp_path / "workspace"
    outside = tmp_path / "outside"
    (workspace / "notes").mkdir(parents=True)
    outside.mkdir()
    (workspace / "notes" / "todo.md").write_text("- buy milk\n")
    (outside / "secret.txt").write_text("do not read\n")
    return workspace, outside


@pytest.fixture
def registry(layout) -> ToolRegistry:
    workspace, _ = layout
    return ToolRegistry(file_tools(PathPolicy(workspace)))


def call(path: str) -> str:
    return json.dumps({"path": path})


def args(**kwargs: object) -> str:
    return json.dumps(kwargs)


async def test_relative_paths_are_relative_to_the_workspace(registry):
    result = await registry.execute("read_file", call("notes/todo.md"))
    assert result.text == "- buy milk\n"


async def test_dotdot_cannot_leave_the_workspace(registry, layout):
    result = await registry.execute("read_file", call("../outside/secret.txt"))
    assert result.is_error and "outside the workspace" in result.text
    assert "restrictToWorkspace" in result.text
    assert "do not read" not in result.text


async def test_absolute_path_outside_is_refused_for_read_and_write(registry, layout):
    _, outside = layout
    read = await registry.execute("read_file", call(str(outside / "secret.txt")))
    assert read.is_error and "outside the workspace" in read.text
    payload = args(path=str(outside / "new.txt"), content="x")
    write = await registry.execute("write_file", payload)
    assert write.is_error and not (outside / "new.txt").exists()


async def test_symlinked_file_pointing_outside_is_refused(registry, layout):
    workspace, outside = layout
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    read = await registry.execute("read_file", call("link.txt"))
    assert read.is_error and "resolves to" in read.text
    write = await registry.execute("write_file", args(path="link.txt", content="pwned"))
    assert write.is_error
    assert (outside / "secret.txt").read_text() == "do not read\n"


async def test_symlinked_directory_pointing_outside_is_refused(registry, layout):
    workspace, outside = layout
    (workspace / "escape").symlink_to(outside, target_is_directory=True)
    assert (await registry.execute("list_dir", call("escape"))).is_error
    assert (await registry.execute("read_file", call("escape/secret.txt"))).is_error
    # A file that does not exist yet is judged by where its parent really is.
    write = await registry.execute("write_file", args(path="escape/new.txt", content="x"))
    assert write.is_error and not (outside / "new.txt").exists()


async def test_dangling_symlink_to_outside_cannot_be_written_through(registry, layout):
    workspace, outside = layout
    (workspace / "dangling").symlink_to(outside / "created-by-model.txt")
    write = await registry.execute("write_file", args(path="dangling", content="x"))
    assert write.is_error and not (outside / "created-by-model.txt").exists()


async def test_symlink_inside_the_workspace_is_fine(registry, layout):
    workspace, _ = layout
    (workspace / "alias.md").symlink_to(workspace / "notes" / "todo.md")
    assert (await registry.execute("read_file", call("alias.md"))).text == "- buy milk\n"


def test_nul_bytes_and_overlong_paths_are_refused(layout):
    workspace, _ = layout
    policy = PathPolicy(workspace, restrict=False)
    with pytest.raises(ToolError, match="NUL"):
        policy.resolve("notes/todo.md\x00.txt")
    with pytest.raises(ToolError, match="longer than 4096"):
        policy.resolve("a/" * 2100)
    with pytest.raises(ToolError, match="component is longer than 255"):
        policy.resolve("x" * 256)
    with pytest.raises(ToolError, match="empty"):
        policy.resolve("  ")


def test_devices_and_fifos_are_refused_even_without_restriction(layout):
    workspace, _ = layout
    policy = PathPolicy(workspace, restrict=False)
    with pytest.raises(ToolError, match="device, FIFO or socket"):
        policy.resolve("/dev/null")
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ToolError, match="device, FIFO or socket"):
        policy.resolve("pipe", for_write=True)


async def test_reading_a_fifo_returns_an_error_instead_of_hanging(registry, layout):
    workspace, _ = layout
    os.mkfifo(workspace / "pipe")
    result = await registry.execute("read_file", call("pipe"))
    assert result.is_error and "FIFO" in result.text
    write = await registry.execute("write_file", args(path="pipe", content="x"))
    assert write.is_error


async def test_restrict_false_allows_outside_paths(layout):
    workspace, outside = layout
    reg = ToolRegistry(file_tools(PathPolicy(workspace, restrict=False)))
    result = await reg.execute("read_file", call(str(outside / "secret.txt")))
    assert result.text == "do not read\n"


async def test_extra_roots_are_usable(layout):
    workspace, outside = layout
    reg = ToolRegistry(file_tools(PathPolicy(workspace, extra_roots=[outside])))
    assert not (await reg.execute("read_file", call(str(outside / "secret.txt")))).is_error
    payload = args(path=str(outside / "new.txt"), content="ok")
    assert not (await reg.execute("write_file", payload)).is_error
    assert (outside / "new.txt").read_text() == "ok"


async def test_read_only_roots_can_be_read_but_not_written(layout):
    workspace, outside = layout
    reg = ToolRegistry(file_tools(PathPolicy(workspace, read_only_roots=[outside])))
    assert not (await reg.execute("read_file", call(str(outside / "secret.txt")))).is_error
    payload = args(path=str(outside / "secret.txt"), content="x")
    write = await reg.execute("write_file", payload)
    assert write.is_error and "read-only" in write.text
    assert (outside / "secret.txt").read_text() == "do not read\n"


def test_home_directory_is_expanded(layout, monkeypatch):
    workspace, _ = layout
    monkeypatch.setenv("HOME", str(workspace))
    policy = PathPolicy(workspace)
    assert policy.resolve("~/notes/todo.md") == (workspace / "notes" / "todo.md").resolve()


async def test_allowed_files_restrict_to_exactly_those_files(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    for name in ("SOUL.md", "USER.md", "AGENTS.md", "memory/MEMORY.md"):
        (workspace / name).write_text(f"# {name}\n")
    policy = PathPolicy(
        workspace, allowed_files={Path("SOUL.md"), Path("USER.md"), Path("memory/MEMORY.md")}
    )
    reg = ToolRegistry(file_tools(policy))
    ok = await reg.execute(
        "edit_file",
        '{"path": "memory/MEMORY.md", "old_text": "# memory/MEMORY.md", "new_text": "# Memory"}',
    )
    assert not ok.is_error
    assert (workspace / "memory" / "MEMORY.md").read_text() == "# Memory\n"
    for path in ("AGENTS.md", "memory/history.jsonl", "memory/MEMORY.md/child", "../SOUL.md"):
        result = await reg.execute("write_file", args(path=path, content="x"))
        assert result.is_error, path
        assert "SOUL.md, USER.md, memory/MEMORY.md" in result.text
    assert (workspace / "AGENTS.md").read_text() == "# AGENTS.md\n"
    assert not (workspace / "memory" / "history.jsonl").exists()


async def test_allowed_file_that_is_a_symlink_to_outside_is_still_refused(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "elsewhere.md").write_text("outside\n")
    (workspace / "SOUL.md").symlink_to(tmp_path / "elsewhere.md")
    reg = ToolRegistry(file_tools(PathPolicy(workspace, allowed_files={Path("SOUL.md")})))
    result = await reg.execute("write_file", args(path="SOUL.md", content="x"))
    assert result.is_error
    assert (tmp_path / "elsewhere.md").read_text() == "outside\n"
