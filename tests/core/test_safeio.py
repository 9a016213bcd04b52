"""``hippobot.safeio``: which links a workspace reader follows, and which it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hippobot.safeio import LinkOutside, NotRegularFile, open_fd, read_regular


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "notes" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".GIT").mkdir()  # one folder with the other on a case-insensitive disk
    (root / ".GIT" / "config").write_text("[core]\n")
    (root / "notes" / "a.md").write_text("inside\n")
    (tmp_path / "outside.md").write_text("outside\n")
    return root


INSIDE = {
    "relative": "notes/a.md",
    "absolute": "{ws}/notes/a.md",
    "up and back": "notes/deep/../a.md",
    "through a folder link": "sub/a.md",  # sub -> notes
}
OUTSIDE = {
    "absolute": "{tmp}/outside.md",
    "relative": "../outside.md",
    "climbing from a subfolder": "notes/../../outside.md",
    "into .git": ".git/config",
    "into .GIT (any case)": ".GIT/config",
    "into .hippobot through a folder link": "state/x",
    "a chain ending outside": "chain1",
}


def _link(ws: Path, target: str) -> Path:
    os.symlink("notes", ws / "sub")
    os.symlink(str(ws.parent), ws / "up")
    (ws / ".hippobot").mkdir()
    (ws / ".hippobot" / "x").write_text("state\n")
    os.symlink(".hippobot", ws / "state")
    os.symlink("chain2", ws / "chain1")
    os.symlink("up/outside.md", ws / "chain2")
    link = ws / "link.md"
    os.symlink(target.format(ws=ws, tmp=ws.parent), link)
    return link


@pytest.mark.parametrize("target", list(INSIDE.values()), ids=list(INSIDE))
def test_a_link_that_stays_inside_is_followed(ws: Path, target: str):
    assert read_regular(_link(ws, target), within=ws) == b"inside\n"


@pytest.mark.parametrize("target", list(OUTSIDE.values()), ids=list(OUTSIDE))
def test_a_link_out_of_the_workspace_or_into_its_state_is_refused(ws: Path, target: str):
    with pytest.raises(LinkOutside):
        read_regular(_link(ws, target), within=ws)


def test_a_folder_link_on_the_way_is_checked_too(ws: Path, tmp_path: Path):
    os.symlink(str(tmp_path), ws / "away")
    with pytest.raises(LinkOutside):
        read_regular(ws / "away" / "outside.md", within=ws)
    assert read_regular(ws / ".git" / "config", within=ws) == b"[core]\n"  # asked for directly


def test_fifo_loop_missing_and_creating(ws: Path):
    os.mkfifo(ws / "pipe")
    with pytest.raises(NotRegularFile):
        read_regular(ws / "pipe", within=ws)  # never blocks
    os.symlink("loop", ws / "loop")
    with pytest.raises(OSError):
        read_regular(ws / "loop", within=ws)
    with pytest.raises(FileNotFoundError):
        read_regular(ws / "notes" / "missing.md", within=ws)
    os.symlink("notes/new.md", ws / "dangling")  # a dangling link inside: created there
    os.close(open_fd(ws / "dangling", within=ws, flags=os.O_WRONLY | os.O_CREAT))
    assert (ws / "notes" / "new.md").is_file()
    os.symlink(str(ws.parent / "planted.md"), ws / "out")  # ... never outside
    with pytest.raises(LinkOutside):
        open_fd(ws / "out", within=ws, flags=os.O_WRONLY | os.O_CREAT)
    assert not (ws.parent / "planted.md").exists()
