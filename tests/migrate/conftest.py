"""Copies of the nanobot homes in tests/fixtures, as nanobot left them (``dot-git`` -> ``.git``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"


def copy_nanobot_home(version: str, target: Path) -> Path:
    shutil.copytree(FIXTURES / f"nanobot-{version}", target, symlinks=True)
    (target / "workspace" / "dot-git").rename(target / "workspace" / ".git")
    return target


def snapshot_tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and modification time (ns)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def nanobot_home(tmp_path: Path) -> Callable[[str], Path]:
    def make(version: str) -> Path:
        return copy_nanobot_home(version, tmp_path / f"nanobot-{version}" / ".nanobot")

    return make
