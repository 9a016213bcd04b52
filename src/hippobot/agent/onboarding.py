"""A workspace's folders, template files and memory version history, created when missing.

Used by ``hippobot onboard``, a chat's start, each ``serve`` user's first request and the
nanobot import. Idempotent, and it never overwrites a file that exists: a user's edits
always win.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hippobot.workspace import MEMORY_DIR, SESSIONS_DIR, SKILLS_DIR, TEMPLATE_FILES, Workspace

__all__ = ["OnboardResult", "ensure_workspace", "template", "write_if_missing"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class OnboardResult:
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    versioning: str = ""
    recorded: str = ""  # a line about agents.defaults.workspace, when -w was given


def template(name: str) -> str:
    """The text of the bundled template ``templates/<name>``."""
    return resources.files("hippobot").joinpath("templates", name).read_text(encoding="utf-8")


def write_if_missing(path: Path, text: str, result: OnboardResult) -> None:
    if path.exists():
        result.kept.append(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    result.created.append(path)


def ensure_workspace(
    workspace: Path, result: OnboardResult | None = None, *, check_history: bool = True
) -> OnboardResult:
    """Make sure the workspace has its folders, template files (missing ones only) and its
    memory version history (versions are always on; a broken history is left alone).

    ``check_history=False`` (a chat's start) only creates a history that is missing: opening
    an existing one to check it costs ~0.1 s before every one-shot reply, and the commits
    that need it check it anyway."""
    result = result or OnboardResult()
    for sub in (MEMORY_DIR, SESSIONS_DIR, SKILLS_DIR):
        (workspace / sub).mkdir(parents=True, exist_ok=True)
    for name in TEMPLATE_FILES:
        write_if_missing(workspace / name, template(name), result)
    if not check_history and os.path.lexists(Workspace(workspace).git_dir):
        return result
    from hippobot.memory.gitstore import GitStore

    git = GitStore(workspace)
    if git.initialized and not git.available:
        result.versioning = f"memory versioning is off: {git.broken_reason}"
    else:
        try:
            created = git.init()
        except Exception as exc:  # versions must never stop a chat from starting
            log.warning("could not start the memory version history: %s", exc)
            result.versioning = f"memory versioning is off: {exc}"
            return result
        result.versioning = (
            "memory versions: new git repository in the workspace"
            if created
            else "memory versions: git repository already present"
        )
    return result
