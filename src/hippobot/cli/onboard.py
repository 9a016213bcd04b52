"""``hippobot onboard``: the home, a commented starter config and the workspace
(:mod:`hippobot.agent.onboarding` creates the workspace's files).

Idempotent, and it never overwrites a file that exists: a user's edits always win.
"""

from __future__ import annotations

import json
from pathlib import Path

from hippobot.agent.onboarding import OnboardResult, ensure_workspace, template, write_if_missing
from hippobot.atomic import atomic_write_text
from hippobot.config import Settings
from hippobot.config.loader import strip_json_comments
from hippobot.lazy_regex import lazy_compile
from hippobot.workspace import CONFIG_FILE

__all__ = ["OnboardResult", "onboard", "record_workspace"]

_WORKSPACE_KEY = lazy_compile(r'("workspace"\s*:\s*)(null|"(?:[^"\\]|\\.)*")')


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
    write_if_missing(settings.config_path, template(CONFIG_FILE), result)
    ensure_workspace(settings.workspace, result)
    if record:
        result.recorded = record_workspace(settings.config_path, settings.workspace)
    return result
