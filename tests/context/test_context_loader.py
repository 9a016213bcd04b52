"""Workspace files: templates skipped, edits visible next turn, unchanged files not re-read."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from hippobot.context.loader import FileCache, WorkspaceFiles, bundled_template, is_template


def age(path: Path, seconds: float = 60) -> None:
    """Make a file look like it was last written a while ago (as real files usually are)."""
    past = time.time() - seconds
    os.utime(path, (past, past))


def write(path: Path, text: str, *, old: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if old:
        age(path)
    return path


def onboarded(ws: Path) -> Path:
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md"):
        write(ws / name, bundled_template(name) or "")
    return ws


def test_fresh_workspace_shows_no_template_scaffolding(tmp_path):
    files = WorkspaceFiles(onboarded(tmp_path))
    assert files.bootstrap() == []
    assert files.memory() is None


def test_customised_files_are_included_in_order(tmp_path):
    ws = onboarded(tmp_path)
    write(ws / "USER.md", "# User\n\n- Name: Ada\n")
    write(ws / "SOUL.md", "# Soul\n\nTerse and dry.\n")
    files = WorkspaceFiles(ws)
    assert [name for name, _ in files.bootstrap()] == ["SOUL.md", "USER.md"]
    assert "Name: Ada" in dict(files.bootstrap())["USER.md"]


def test_template_with_extra_whitespace_still_counts_as_template(tmp_path):
    text = bundled_template("AGENTS.md")
    assert text is not None
    assert is_template("\n\n" + text.replace("\n", "\r\n") + "\n\n", "AGENTS.md")
    assert not is_template(text + "\n- Always answer in French.\n", "AGENTS.md")
    assert not is_template("anything", "NO_SUCH_TEMPLATE.md")


def test_a_soul_made_from_the_earlier_template_is_still_untouched_and_quotes_no_answer(tmp_path):
    # The earlier SOUL.md said '"I don't know" beats a confident guess.'; once Dream had
    # edited the file it was sent, and the local model answered "I don't know." with the fact
    # in front of it (4 answers in 2 of 9 core runs). A workspace made before still holds that
    # text, untouched: it is not sent either.
    earlier = bundled_template("earlier/SOUL.md")
    assert earlier is not None and "\"I don't know\"" in earlier
    assert "don't know" not in (bundled_template("SOUL.md") or "")
    ws = onboarded(tmp_path)
    write(ws / "SOUL.md", earlier)
    assert "SOUL.md" not in [name for name, _ in WorkspaceFiles(ws).bootstrap()]
    assert not is_template(earlier + "- Always answer in French.\n", "SOUL.md")


def test_empty_files_are_skipped(tmp_path):
    write(tmp_path / "AGENTS.md", "   \n\n")
    write(tmp_path / "memory" / "MEMORY.md", "")
    files = WorkspaceFiles(tmp_path)
    assert files.bootstrap() == []
    assert files.memory() is None


def test_memory_with_a_real_fact_is_returned(tmp_path):
    template = bundled_template("memory/MEMORY.md") or ""
    write(tmp_path / "memory" / "MEMORY.md", template.replace("### Preferences\n", "### Preferences\n- Likes dark mode\n"))
    assert "Likes dark mode" in (WorkspaceFiles(tmp_path).memory() or "")


def test_project_files_replace_the_workspace_ones(tmp_path):
    ws, project = tmp_path / "ws", tmp_path / "project"
    write(ws / "AGENTS.md", "workspace agents rules")
    write(ws / "SOUL.md", "workspace soul")
    write(project / "AGENTS.md", "project agents rules")
    files = WorkspaceFiles(ws, project)
    # no fallback: the project has no SOUL.md, so none is shown
    assert files.bootstrap() == [("AGENTS.md", "project agents rules")]


def test_memory_always_comes_from_the_workspace(tmp_path):
    ws, project = tmp_path / "ws", tmp_path / "project"
    write(ws / "memory" / "MEMORY.md", "- Lives in Lyon")
    write(project / "memory" / "MEMORY.md", "- project memory must not be used")
    assert WorkspaceFiles(ws, project).memory() == "- Lives in Lyon"


def test_project_equal_to_workspace_is_no_project(tmp_path):
    assert WorkspaceFiles(tmp_path, tmp_path).project is None


def test_edit_is_visible_on_the_next_read_without_restart(tmp_path):
    soul = write(tmp_path / "SOUL.md", "Be cheerful.")
    files = WorkspaceFiles(tmp_path)
    assert files.bootstrap() == [("SOUL.md", "Be cheerful.")]
    soul.write_text("Be grumpy.", encoding="utf-8")  # same size, written just now
    assert files.bootstrap() == [("SOUL.md", "Be grumpy.")]


def test_unchanged_files_are_not_read_again(tmp_path):
    write(tmp_path / "SOUL.md", "Be cheerful.")
    write(tmp_path / "USER.md", "Name: Ada")
    files = WorkspaceFiles(tmp_path)
    first = files.bootstrap()
    reads = files.disk_reads
    assert reads == 2  # AGENTS.md is missing: a stat, no read
    for _ in range(5):
        assert files.bootstrap() == first
    assert files.disk_reads == reads
    write(tmp_path / "USER.md", "Name: Ada Lovelace")
    files.bootstrap()
    assert files.disk_reads == reads + 1  # only the changed file


def test_recently_written_file_is_rechecked_but_keeps_its_object(tmp_path):
    path = write(tmp_path / "SOUL.md", "Be cheerful.", old=False)
    cache = FileCache()
    first = cache.read(path, within=tmp_path)
    second = cache.read(path, within=tmp_path)  # racy: re-read, same bytes, same object
    assert second is first


def test_non_utf8_file_is_shown_with_replacement_chars(tmp_path, caplog):
    (tmp_path / "USER.md").write_bytes(b"Name: Jos\xe9 \xff\xfe\n")
    age(tmp_path / "USER.md")
    files = WorkspaceFiles(tmp_path)
    with caplog.at_level(logging.WARNING):
        text = files.read("USER.md")
        files.read("USER.md")
    assert text.text.startswith("Name: Jos\ufffd")
    assert text.warning and "not valid UTF-8" in text.warning
    assert caplog.text.count("not valid UTF-8") == 1


def test_enormous_file_is_cut_with_a_visible_note(tmp_path):
    write(tmp_path / "AGENTS.md", "rule\n" * 10_000)
    files = WorkspaceFiles(tmp_path, max_file_chars=1_000)
    result = files.read("AGENTS.md")
    assert result.truncated and result.original_chars == 50_000
    assert len(result.text) < 1_200
    assert result.text.endswith(
        "[... truncated: 1000 of 50000 characters shown; edit AGENTS.md to shorten it]"
    )


def test_missing_and_unreadable_files_do_not_raise(tmp_path):
    (tmp_path / "SOUL.md").mkdir()  # a directory where a file should be
    files = WorkspaceFiles(tmp_path)
    assert files.read("AGENTS.md").exists is False
    soul = files.read("SOUL.md")
    assert soul.text == "" and soul.warning
    assert files.bootstrap() == []
