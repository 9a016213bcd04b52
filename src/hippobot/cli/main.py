"""The ``hippobot`` command line (SPEC 4.5).

Heavy modules (provider SDKs, the agent, the HTTP server) are imported inside the commands
that need them, so ``hippobot --help`` and read-only commands start fast.
"""

# Command modules do without ``from __future__ import annotations``: the command layer
# (cli/_app.py) reads each parameter's Annotated declaration as a real object.

import errno
import gc
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

from hippobot import __version__
from hippobot.cli._app import Option, run
from hippobot.cli._common import (
    JsonOpt,
    SessionOpt,
    WorkspaceOpt,
    api_for,
    app,
    print_json,
    settings_for,
    start_over,
)
from hippobot.errors import HippobotError

__all__ = ["_doctor", "_import_cmd", "_memory_cmds", "_sessions_cmds", "_usage_cmd", "app", "main"]


@app.callback
def _root(
    invoked: str | None,
    verbose: Annotated[bool, Option("--verbose", "-v", help="Show debug logs.")] = False,
    version: Annotated[bool, Option("--version", help="Print the version.")] = False,
) -> None:
    if version:  # before anything else, with or without a command
        sys.stdout.write(f"hippobot {__version__}\n")
        sys.exit(0)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="hippobot: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("httpx", "httpcore", "openai", "anthropic", "dulwich"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    if invoked != "agent":
        start_over()  # only agent's start is worth the wait; the rest collect from here on


# --- setup and chat -------------------------------------------------------------------


@app.command()
def onboard(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Create the home, a commented config.json and the workspace.

    The home is ~/.hippobot (or $HIPPOBOT_HOME); the workspace gets its templates and memory
    version history. With -w DIR, DIR becomes the default workspace (recorded in config.json).
    """
    from hippobot.cli.onboard import onboard as do_onboard

    settings = settings_for(workspace)
    result = do_onboard(settings, record=workspace is not None)
    if json_out:
        print_json({
            "workspace": str(settings.workspace), "config": str(settings.config_path),
            "created": [str(p) for p in result.created], "kept": [str(p) for p in result.kept],
            "versioning": result.versioning, "recorded": result.recorded or None,
            "model_configured": settings.model_configured(),
        })
        return
    for path in result.created:
        sys.stdout.write(f"created  {path}\n")
    for path in result.kept:
        sys.stdout.write(f"kept     {path}\n")
    sys.stdout.write(f"{result.versioning}\n")
    if result.recorded:
        sys.stdout.write(f"{result.recorded}\n")
    if not settings.model_configured():
        sys.stdout.write(
            f"\nNext: put your provider in {settings.config_path} (or set HIPPOBOT_MODEL and "
            "HIPPOBOT_API_KEY), then run `hippobot agent`.\n"
        )


@app.command()
def agent(
    message: Annotated[str | None, Option("--message", "-m", help="Send one message, print the reply, exit.")] = None,
    session: SessionOpt = "cli:direct",
    workspace: WorkspaceOpt = None,
    project: Annotated[Path | None, Option("--project", help="Work in this project directory (its AGENTS.md/SOUL.md/USER.md apply).")] = None,
    image: Annotated[list[Path] | None, Option("--image", help="Attach an image (repeatable).")] = None,
    model: Annotated[str | None, Option("--model", help="Model name for this run.")] = None,
    provider: Annotated[str | None, Option("--provider", help="Provider entry to use.")] = None,
    json_out: Annotated[bool, Option("--json", help="With -m: print the reply as JSON for scripts.")] = False,
) -> None:
    """Chat with the agent, or send one message with -m."""
    import asyncio  # not at the top: --help and most commands never need it

    from hippobot.agent.onboarding import ensure_workspace
    from hippobot.cli.chat import interactive, one_shot, piped

    settings = settings_for(workspace, model=model, provider=provider)
    settings.model_target()  # fail fast, before anything is written
    ensure_workspace(settings.workspace, check_history=False)
    bot = api_for(settings, project)
    media = [str(p) for p in image or []]
    if message is None:
        start_over()  # a chat runs for long: one-shot ends its start at the model's answer
    if message is not None:
        code = asyncio.run(one_shot(bot, session, message, media, as_json=json_out))
    elif media:
        raise HippobotError("--image needs a message: use -m \"...\" --image PATH")
    elif sys.stdin.isatty():
        code = asyncio.run(interactive(bot, session))
    else:
        code = asyncio.run(piped(bot, session, sys.stdin))
    sys.exit(code)


@app.command()
def status(session: SessionOpt = "cli:direct", workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Model, session, tokens used vs budget, pending memory."""
    report = api_for(settings_for(workspace)).status(session)
    sys.stdout.write((report.to_json() if json_out else report.to_text()) + "\n")


@app.command()
def context(
    session: SessionOpt = "cli:direct",
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
    full: Annotated[bool, Option("--full", help="Print the exact messages that would be sent.")] = False,
    project: Annotated[Path | None, Option("--project", help="Project directory.")] = None,
) -> None:
    """What the model sees: each prompt section with its token count."""
    report = api_for(settings_for(workspace), project).context(session)
    sys.stdout.write((report.to_json(full=full) if json_out else report.to_text(full=full)) + "\n")


@app.command()
def dream(
    workspace: WorkspaceOpt = None,
    dry_run: Annotated[bool, Option("--dry-run", help="Print the findings, edit nothing.")] = False,
    json_out: JsonOpt = False,
    background: Annotated[bool, Option("--background", help="Quiet run for a detached job: the result goes to .hippobot/dream/background.log.")] = False,
) -> None:
    """Distil pending history into the memory files now.

    Edits SOUL.md, USER.md and memory/MEMORY.md, one commit per run. Messages still waiting
    to be archived (a /new or a consolidation that did not finish) are archived first.
    Prints what became of every durable fact: written (file:line), already known, or
    rejected with a reason; entries left pending say why (see `memory history --pending`).
    Exits 1 when the run failed or stopped (the entries stay pending), another Dream is
    running, or messages could still not be archived, with the reason on stderr.
    """
    from hippobot.agent.api import SHELL_HINTS

    bot = api_for(settings_for(workspace))

    async def run() -> Any:
        try:
            return await bot.dream(dry_run=dry_run)
        finally:
            await bot.aclose(timeout=5.0)

    import asyncio  # not at the top: --help and most commands never need it
    result = asyncio.run(run())
    waiting = [] if dry_run else bot.archives_waiting()
    for wait in waiting:
        sys.stderr.write(f"error: {wait.describe()}\n")
    if background:
        from datetime import datetime

        stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
        sys.stderr.write(f"[{stamp}] {result.describe(SHELL_HINTS)}\n")
    elif json_out:
        print_json(result.to_dict())
    elif result.ok:
        sys.stdout.write(result.describe(SHELL_HINTS) + "\n")
    if not result.ok:
        if not background:
            sys.stderr.write(f"error: {result.describe(SHELL_HINTS).splitlines()[0]}\n")  # one line
        sys.exit(1)
    if waiting:
        sys.exit(1)


@app.command()
def serve(
    host: Annotated[str | None, Option("--host", help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, Option("--port", help="Port (default 8900).")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Serve an OpenAI-compatible API with memory.

    POST /v1/chat/completions, GET /v1/models, and the memory page at /. Clients need a key even on loopback: serve.apiKey / HIPPOBOT_SERVE_KEY, else the
    token in <home>/serve-token, printed at start-up with the memory page's login URL.
    """
    from hippobot.server.run import run_server

    settings = settings_for(workspace)
    settings.model_target()
    run_server(settings, host=host, port=port)


# The command modules register their commands on `app` as they are imported; after the
# commands above, which `--help` lists first (in the order they are registered).
from hippobot.cli import doctor as _doctor  # noqa: E402
from hippobot.cli import import_cmd as _import_cmd  # noqa: E402
from hippobot.cli import memory_cmds as _memory_cmds  # noqa: E402
from hippobot.cli import sessions_cmds as _sessions_cmds  # noqa: E402
from hippobot.cli import usage_cmd as _usage_cmd  # noqa: E402


def main() -> None:
    gc.disable()  # until the command's start is over (cli._common.start_over says why)
    try:
        run(app, sys.argv[1:], prog="hippobot")
    except HippobotError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2 if exc.__class__.__name__ == "ConfigError" else 1)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    except OSError as exc:  # disk full, read-only, a folder where a file should be, ...
        if exc.errno == errno.EPIPE:  # stdout's reader left (`| head`): end quietly
            _drop_output()
            sys.exit(1)
        where = f" ({exc.filename})" if exc.filename else ""
        sys.stderr.write(f"error: {exc.strerror or exc}{where}; nothing was changed by this command\n")
        sys.exit(1)


def _drop_output() -> None:
    """Point stdout and stderr at the null device, so that flushing them at exit does not
    fail again on the closed pipe (and print a traceback the reader never asked for)."""
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(null, stream.fileno())
        except (OSError, ValueError):  # not a real file (a test's StringIO)
            pass
