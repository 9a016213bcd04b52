"""read_file / write_file / edit_file / list_dir on real files in a workspace."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from hippobot.tools import PathPolicy, ToolRegistry, file_tools
from hippobot.tools import files as files_module


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def registry(workspace: Path) -> ToolRegistry:
    return ToolRegistry(file_tools(PathPolicy(workspace), max_read_chars=200))


async def run(registry: ToolRegistry, name: str, **kwargs: object):
    return await registry.execute(name, json.dumps(kwargs))


# --- write and read -------------------------------------------------------------------


async def test_write_creates_parents_and_read_returns_the_same_text(registry, workspace):
    content = "# Plan\n\n- ship it ✓\n"
    result = await run(registry, "write_file", path="projects/a/plan.md", content=content)
    size = len(content.encode())
    assert result.text == f"Created projects/a/plan.md ({size} bytes written)"
    assert (workspace / "projects" / "a" / "plan.md").read_text(encoding="utf-8") == content
    assert (await run(registry, "read_file", path="projects/a/plan.md")).text == content


async def test_overwrite_says_so_and_keeps_the_file_mode(registry, workspace):
    script = workspace / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o755)
    result = await run(registry, "write_file", path="run.sh", content="echo new\n")
    assert result.text.startswith("Overwrote run.sh")
    assert script.read_text() == "echo new\n"
    assert script.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in workspace.iterdir()) == ["run.sh"]  # no temp file left


async def test_write_onto_a_directory_is_an_error(registry, workspace):
    (workspace / "docs").mkdir()
    result = await run(registry, "write_file", path="docs", content="x")
    assert result.is_error and "is a directory" in result.text


@pytest.mark.parametrize("failing", ["replace", "fsync"])
async def test_failed_write_leaves_the_old_file_and_no_temp_file(
    registry, workspace, monkeypatch, failing
):
    target = workspace / "MEMORY.md"
    target.write_text("precious\n")

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files_module.os, failing, disk_full)
    result = await run(registry, "write_file", path="MEMORY.md", content="new content\n")
    assert result.is_error
    assert "No space left on device" in result.text and "left unchanged" in result.text
    assert target.read_text() == "precious\n"
    assert [p.name for p in workspace.iterdir()] == ["MEMORY.md"]


async def test_edit_failure_while_writing_leaves_the_old_file(registry, workspace, monkeypatch):
    target = workspace / "USER.md"
    target.write_text("name: Ada\n")

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files_module.os, "replace", read_only)
    result = await run(registry, "edit_file", path="USER.md", old_text="Ada", new_text="Grace")
    assert result.is_error and "Read-only file system" in result.text
    assert target.read_text() == "name: Ada\n"
    assert [p.name for p in workspace.iterdir()] == ["USER.md"]


async def test_missing_file_suggests_list_dir(registry, workspace):
    (workspace / "notes").mkdir()
    result = await run(registry, "read_file", path="notes/missing/deep.md")
    assert result.is_error
    assert "does not exist" in result.text and "list_dir on 'notes'" in result.text


async def test_binary_files_are_refused(registry, workspace):
    (workspace / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    result = await run(registry, "read_file", path="image.png")
    assert result.is_error and "binary" in result.text


async def test_non_utf8_text_is_decoded_with_replacement(registry, workspace):
    (workspace / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    result = await run(registry, "read_file", path="latin1.txt")
    assert not result.is_error and result.text == "caf\ufffd\n"


async def test_offset_and_limit_select_lines_and_say_how_to_go_on(registry, workspace):
    (workspace / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = await run(registry, "read_file", path="n.txt", offset=3, limit=2)
    assert result.text == "line 3\nline 4\n[lines 3-4 of 10. Read on with offset=5.]"
    tail = await run(registry, "read_file", path="n.txt", offset=9)
    assert tail.text == "line 9\nline 10\n[lines 9-10 of 10.]"
    past = await run(registry, "read_file", path="n.txt", offset=11)
    assert past.is_error and "has 10 lines" in past.text
    bad = await run(registry, "read_file", path="n.txt", offset=0)
    assert bad.is_error


async def test_long_output_is_truncated_with_a_marker_to_read_the_rest(registry, workspace):
    (workspace / "big.txt").write_text("".join(f"{i:03d} {'x' * 25}\n" for i in range(1, 101)))
    result = await run(registry, "read_file", path="big.txt")
    body, marker = result.text.rsplit("\n", 1)
    assert len(body) <= 200
    assert body.startswith("001 ") and body.endswith("006 " + "x" * 25)
    assert "showing lines 1-6 of 100" in marker and "offset=7" in marker
    resumed = await run(registry, "read_file", path="big.txt", offset=7)
    assert resumed.text.startswith("007 ")


async def test_a_single_huge_line_shows_its_start(registry, workspace):
    (workspace / "min.js").write_text("a" * 1000 + "\nsecond\n")
    result = await run(registry, "read_file", path="min.js")
    assert result.text.startswith("a" * 200 + "\n[... line 1 is longer than 200")
    assert "offset=2" in result.text


async def test_empty_file(registry, workspace):
    (workspace / "empty.md").write_text("")
    result = await run(registry, "read_file", path="empty.md")
    assert not result.is_error and "empty" in result.text


# --- edit -----------------------------------------------------------------------------


async def test_edit_replaces_exactly_one_match(registry, workspace):
    (workspace / "SOUL.md").write_text("# Soul\n\nBe brief.\nBe kind.\n")
    result = await run(
        registry, "edit_file", path="SOUL.md", old_text="Be brief.", new_text="Be concise."
    )
    assert result.text == "Edited SOUL.md: 1 replacement"
    assert (workspace / "SOUL.md").read_text() == "# Soul\n\nBe concise.\nBe kind.\n"


async def test_edit_with_missing_text_shows_the_closest_line(registry, workspace):
    (workspace / "a.py").write_text("def f():\n    return 1\n")
    result = await run(registry, "edit_file", path="a.py", old_text="retrun 1", new_text="x")
    assert result.is_error and "not found" in result.text
    assert "line 2: 'return 1'" in result.text
    assert (workspace / "a.py").read_text() == "def f():\n    return 1\n"
    # A piece of a line is a match too.
    assert not (
        await run(registry, "edit_file", path="a.py", old_text="rn 1", new_text="rn 2")
    ).is_error
    assert (workspace / "a.py").read_text() == "def f():\n    return 2\n"


async def test_edit_reports_a_whitespace_only_mismatch(registry, workspace):
    (workspace / "a.py").write_text("if x:\n\treturn 1\n")
    result = await run(
        registry, "edit_file", path="a.py", old_text="if x:\n    return 1", new_text="pass"
    )
    assert result.is_error and "whitespace is ignored" in result.text


async def test_ambiguous_edit_asks_for_context_and_replace_all_does_all(registry, workspace):
    path = workspace / "todo.md"
    path.write_text("- [ ] a\n- [ ] b\n- [ ] c\n")
    result = await run(registry, "edit_file", path="todo.md", old_text="- [ ]", new_text="- [x]")
    assert result.is_error and "matches 3 places" in result.text and "replace_all" in result.text
    assert path.read_text() == "- [ ] a\n- [ ] b\n- [ ] c\n"
    done = await run(
        registry, "edit_file", path="todo.md", old_text="- [ ]", new_text="- [x]", replace_all=True
    )
    assert done.text == "Edited todo.md: 3 replacements"
    assert path.read_text() == "- [x] a\n- [x] b\n- [x] c\n"


async def test_empty_or_no_op_edits_are_errors(registry, workspace):
    (workspace / "a.md").write_text("text\n")
    empty = await run(registry, "edit_file", path="a.md", old_text="", new_text="x")
    assert empty.is_error and "write_file" in empty.text
    same = await run(registry, "edit_file", path="a.md", old_text="text", new_text="text")
    assert same.is_error and "identical" in same.text


async def test_edit_matches_a_crlf_file_written_with_plain_newlines(registry, workspace):
    (workspace / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = await run(registry, "edit_file", path="win.txt", old_text="one\ntwo", new_text="1\n2")
    assert not result.is_error
    assert (workspace / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_refuses_non_utf8_files(registry, workspace):
    (workspace / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    result = await run(registry, "edit_file", path="latin1.txt", old_text="caf", new_text="tea")
    assert result.is_error and "UTF-8" in result.text
    assert (workspace / "latin1.txt").read_bytes() == "café\n".encode("latin-1")


async def test_edit_of_a_missing_file_suggests_list_dir(registry):
    result = await run(registry, "edit_file", path="nope.md", old_text="a", new_text="b")
    assert result.is_error and "list_dir" in result.text


# --- list -----------------------------------------------------------------------------


async def test_list_dir_sorts_marks_directories_sizes_and_symlinks(registry, workspace):
    (workspace / "b.txt").write_text("hello")
    (workspace / "a_dir").mkdir()
    (workspace / ".hidden").write_text("x" * 2048)
    (workspace / "link").symlink_to("b.txt")
    result = await run(registry, "list_dir")
    assert result.text.splitlines() == [
        ".hidden  (2.0 KB)",
        "a_dir/",
        "b.txt  (5 B)",
        "link -> b.txt (symlink)",
    ]


async def test_list_dir_caps_long_listings(registry, workspace):
    many = workspace / "many"
    many.mkdir()
    for i in range(files_module.MAX_LIST_ENTRIES + 7):
        (many / f"f{i:04d}").touch()
    lines = (await run(registry, "list_dir", path="many")).text.splitlines()
    assert len(lines) == files_module.MAX_LIST_ENTRIES + 1
    assert lines[0] == "f0000  (0 B)"
    assert "7 more entries not shown" in lines[-1]


async def test_list_dir_errors(registry, workspace):
    (workspace / "f.txt").write_text("x")
    (workspace / "empty").mkdir()
    assert "use read_file" in (await run(registry, "list_dir", path="f.txt")).text
    assert (await run(registry, "list_dir", path="missing")).is_error
    assert "is empty" in (await run(registry, "list_dir", path="empty")).text


async def test_reading_a_directory_points_to_list_dir(registry, workspace):
    (workspace / "d").mkdir()
    result = await run(registry, "read_file", path="d")
    assert result.is_error and "list_dir" in result.text


def test_temp_files_are_not_left_after_many_writes(workspace):
    tools = {t.name: t for t in file_tools(PathPolicy(workspace))}
    for i in range(5):
        tools["write_file"].fn(path="x.md", content=f"v{i}")
    assert os.listdir(workspace) == ["x.md"]
    assert (workspace / "x.md").read_text() == "v4"
