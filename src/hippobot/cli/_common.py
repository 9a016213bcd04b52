"""What every ``hippobot`` command module shares: the command groups, the common options
and the settings/API helpers (the command layer itself is ``cli/_app.py``).

``cli/main.py`` and each ``*_cmd(s).py`` module import this one and never each other's
commands (main imports the command modules only to register them), so the CLI has no
import cycle.
"""

# No ``from __future__ import annotations`` here: the options below are read by the command
# layer as real Annotated objects (see cli/_app.py).

import gc
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from hippobot.cli._app import Group, Option
from hippobot.errors import HippobotError

if TYPE_CHECKING:
    from hippobot.agent.api import Api
    from hippobot.config import Settings

__all__ = [
    "JsonOpt",
    "SessionOpt",
    "WorkspaceOpt",
    "api_for",
    "app",
    "memory_app",
    "print_json",
    "sessions_app",
    "settings_for",
    "start_over",
]

app = Group(help="A personal AI agent whose memory you can read, search, correct and undo.")
sessions_app = app.group("sessions", help="List, show and delete conversations.")
memory_app = app.group("memory", help="Inspect, search and restore memory.")

WorkspaceOpt = Annotated[
    Path | None,
    Option("--workspace", "-w", help="Workspace directory (default: ~/.hippobot/workspace)."),
]
SessionOpt = Annotated[str, Option("--session", "-s", help="Session key channel:chat.")]
JsonOpt = Annotated[bool, Option("--json", help="Print JSON for scripts.")]


def start_over() -> None:
    """The command's start is over: the cyclic garbage collector, off since :func:`main`
    began (``hippobot.cli.main``), runs again from here on. Start-up allocates hundreds of
    thousands of objects (modules, dataclasses, the config's schemas) and frees almost none,
    so collecting during it only walks live objects: ~110 collections, ~45 ms of a one-shot's
    start on the project's machine. What the start made is frozen first (never scanned
    again, as it lives as long as the process), or the first collection would walk it all
    (~20 ms). Calling it again does nothing."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def settings_for(
    workspace: Path | None = None, *, model: str | None = None, provider: str | None = None
) -> "Settings":
    """The settings of this run (file < env < flags)."""
    from hippobot.config import load_settings

    settings = load_settings(workspace=workspace, model=model, provider=provider)
    if settings.nanobot_workspace is not None:
        _read_nanobot_in(settings)
    return settings


def _read_nanobot_in(settings: "Settings") -> None:
    """The configuration named a nanobot workspace: hippobot works in its own and first
    reads in what nanobot changed there (never writing a byte of nanobot's)."""
    from hippobot.migrate.nanobot import bring_in, describe_bring_in

    assert settings.nanobot_workspace is not None
    try:
        report = bring_in(settings)
    except (OSError, HippobotError) as exc:  # a bad nanobot file must not stop hippobot
        logging.getLogger(__name__).warning(
            "could not read nanobot's workspace %s in (%s); hippobot's own %s is used as it is",
            settings.nanobot_workspace, exc, settings.workspace,
        )
        return
    line = describe_bring_in(settings.nanobot_workspace, settings.workspace, report)
    if line:
        sys.stderr.write(f"hippobot: {line}\n")


def api_for(settings: "Settings", project: Path | None = None) -> "Api":
    """The application API every command goes through (reads never write)."""
    from hippobot.agent.api import Api

    return Api(settings, project=project)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
