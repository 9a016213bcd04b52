"""``hippobot doctor``: check the setup, one line per check (logic in hippobot.agent.doctor)."""

# No ``from __future__ import annotations`` here: see the note in cli/_app.py.

import sys
from typing import Annotated

from hippobot.cli._app import Option
from hippobot.cli._common import JsonOpt, WorkspaceOpt, app, print_json, settings_for
from hippobot.errors import ConfigError

__all__ = ["doctor"]


@app.command()
def doctor(
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
    timeout: Annotated[float, Option("--timeout", min=1, help="Seconds each model request may take (default 60).")] = 60.0,
) -> None:
    """Check the setup: config, endpoint, model, window, tools, speed, sandbox, memory.

    One line per check, each failure with its fix: the config parses; the endpoint answers
    and lists the model; contextWindowTokens fits the server's context (llama.cpp, vLLM and
    Ollama say it); the model calls tools (or writes them as text); prompt and generation
    speed; the exec sandbox; embeddings, when configured; the memory history; disk space.
    Two small model requests are made. Exits 1 when something would fail (warnings do not).
    """
    from hippobot.agent.doctor import Check, run_doctor

    try:
        settings, problem = settings_for(workspace), None
    except ConfigError as exc:
        settings, problem = None, str(exc)

    def show(check: Check) -> None:
        if not json_out:
            sys.stdout.write(check.line() + "\n")
            sys.stdout.flush()

    import asyncio  # not at the top: --help and most commands never need it
    report = asyncio.run(run_doctor(settings, config_error=problem, probe_timeout=timeout, on_check=show))
    if json_out:
        print_json(report.to_dict())
    elif not report.ok:
        failed = sum(1 for c in report.checks if c.status == "fail")
        sys.stderr.write(f"error: {failed} check(s) failed; the fix is on each FAIL line\n")
    sys.exit(0 if report.ok else 1)
