"""``hippobot import nanobot [PATH]``: set up hippobot's home from a nanobot home."""

# No ``from __future__ import annotations`` here: see the note in cli/_app.py.

import sys
from pathlib import Path
from typing import Annotated

from hippobot.cli._app import Argument
from hippobot.cli._common import WorkspaceOpt, app, settings_for

__all__ = ["import_app"]

import_app = app.group("import", help="Bring conversations, memory and config over from another agent.")


@import_app.command("nanobot")
def import_nanobot_cmd(
    path: Annotated[Path, Argument(help="The nanobot home (holds config.json and workspace/).")] = Path("~/.nanobot"),
    workspace: WorkspaceOpt = None,
) -> None:
    """Import a nanobot home (0.2.x or 0.3.x).

    Brings config (secrets carried, never printed), AGENTS/SOUL/USER/MEMORY.md, skills, history and its cursors, the memory git history and
    every session under its key. nanobot's files are only read; running it again adds only
    what is new."""
    from hippobot.migrate.nanobot import import_nanobot

    settings = settings_for(workspace)
    home, report = import_nanobot(path, settings)
    sys.stdout.write(
        f"Importing nanobot {home.layout} home {home.root} (workspace {home.workspace})\n"
        f"into {settings.home} (workspace {settings.workspace})\n"
    )
    for line in report.lines():
        sys.stdout.write(line + "\n")
