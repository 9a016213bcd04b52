"""Create the home, a commented starter config and the workspace templates.

Idempotent, and it never overwrites a file that exists: a user's edits always win.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hippobot.atomic import atomic_write_text
from hippobot.config import Settings
from hippobot.config.loader import strip_json_comments
from hippobot.workspace import (
    CONFIG_FILE,
    MEMORY_DIR,
    SESSIONS_DIR,
    SKILLS_DIR,
    TEMPLATE_FILES,
    Workspace,
)

__all__ = ["OnboardResult", "ensure_workspace", "onboard", "record_workspace"]

log = logging.getLogger(__name__)

WORKSPACE_TEMPLATES = TEMPLATE_FILES


@dataclass(slots=True)
class OnboardResult:
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    versioning: str = ""
    recorded: str = ""  # a line about agents.defaults.workspace, when -w was given


def _template(name: str) -> str:
    return resources.files("hippobot").joinpath("templates", name).read_text(encoding="utf-8")


def _write_if_missing(path: Path, text: str, result: OnboardResult) -> None:
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
    for name in WORKSPACE_TEMPLATES:
        _write_if_missing(workspace / name, _template(name), result)
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


_WORKSPACE_KEY = re.compile(r'("workspace"\s*:\s*)(null|"(?:[^"\\]|\\.)*")')


def record_workspace(config_path: Path, workspace: Path) -> str:
    """Set ``agents.defaults.workspace`` in ``config.json`` to ``workspace``, keeping the
    file's comments and layout; returns one line saying what happened."""
    try:
        raw = config_path.read_text(encoding="utf-8")
        data = json.loads(strip_json_comments(raw) or "{}")
    except (OSError, ValueError) as exc:
        return f"could not record the workspace in {config_path} ({exc}); pass -w each time"
    defaults = data.setdefault("agents", {}).setdefault("defaults", {})
    want = str(workspace)
    if defaults.get("workspace") == want:
        return f"workspace {want} is already the default in {config_path}"
    defaults["workspace"] = want
    new = None
    for m in _WORKSPACE_KEY.finditer(raw):  # the key under agents.defaults, edited in place
        candidate = raw[: m.start(2)] + json.dumps(want, ensure_ascii=False) + raw[m.end(2) :]
        try:
            if json.loads(strip_json_comments(candidate)) == data:
                new = candidate
                break
        except ValueError:
            continue
    if new is None:  # no such key yet: write the file anew (its comments, if any, are lost)
        new = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    atomic_write_text(config_path, new)
    return f"recorded workspace {want} in {config_path}"


def onboard(settings: Settings, *, record: bool = False) -> OnboardResult:
    """``record``: make ``settings.workspace`` the default in config.json (``onboard -w``)."""
    result = OnboardResult()
    settings.home.mkdir(parents=True, exist_ok=True)
    _write_if_missing(settings.config_path, _template(CONFIG_FILE), result)
    ensure_workspace(settings.workspace, result)
    if record:
        result.recorded = record_workspace(settings.config_path, settings.workspace)
    return result
