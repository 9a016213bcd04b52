"""Create the home, a commented starter config and the workspace templates.

Idempotent, and it never overwrites a file that exists: a user's edits always win.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hippobot.config import Settings

__all__ = ["OnboardResult", "ensure_workspace", "onboard"]

log = logging.getLogger(__name__)

WORKSPACE_TEMPLATES = ("AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md")


@dataclass(slots=True)
class OnboardResult:
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    versioning: str = ""


def _template(name: str) -> str:
    return resources.files("hippobot").joinpath("templates", name).read_text(encoding="utf-8")


def _write_if_missing(path: Path, text: str, result: OnboardResult) -> None:
    if path.exists():
        result.kept.append(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    result.created.append(path)


def ensure_workspace(workspace: Path, result: OnboardResult | None = None) -> OnboardResult:
    """Make sure the workspace has its folders and template files (missing ones only)."""
    result = result or OnboardResult()
    for sub in ("memory", "sessions", "skills"):
        (workspace / sub).mkdir(parents=True, exist_ok=True)
    for name in WORKSPACE_TEMPLATES:
        _write_if_missing(workspace / name, _template(name), result)
    return result


def onboard(settings: Settings) -> OnboardResult:
    result = OnboardResult()
    settings.home.mkdir(parents=True, exist_ok=True)
    _write_if_missing(settings.config_path, _template("config.json"), result)
    ensure_workspace(settings.workspace, result)
    from hippobot.memory.gitstore import GitStore

    git = GitStore(settings.workspace)
    if git.initialized and not git.available:
        result.versioning = f"memory versioning is off: {git.broken_reason}"
    else:
        created = git.init()
        result.versioning = (
            "memory versions: new git repository in the workspace"
            if created
            else "memory versions: git repository already present"
        )
    return result
