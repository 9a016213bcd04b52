"""``hippobot usage``: model requests and tokens per day and kind of job, from the ledger."""

# No ``from __future__ import annotations`` here: see the note in cli/_app.py.

import sys
from typing import Annotated

from hippobot.cli._app import Option
from hippobot.cli._common import JsonOpt, WorkspaceOpt, api_for, app, print_json, settings_for


@app.command()
def usage(
    workspace: WorkspaceOpt = None,
    days: Annotated[int | None, Option("--days", min=1, help="Only the last N days with requests.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Model requests and tokens per day and job.

    Prompt, cached and completion tokens of turns, consolidation and Dream, as the endpoints
    reported them."""
    from hippobot.agent.api import format_table

    rows, path = api_for(settings_for(workspace)).usage(days)
    if json_out:
        print_json({"ledger": str(path), "rows": [r.to_dict() for r in rows]})
    else:
        sys.stdout.write(format_table(rows, path=path) + "\n")
