"""``hippobot memory show|history|search|reindex|log|restore``."""

# No ``from __future__ import annotations`` here: see the note in cli/_app.py.

import json
import sys
from dataclasses import asdict
from typing import Annotated

from hippobot.cli._app import Argument, Option
from hippobot.cli._common import (
    JsonOpt,
    WorkspaceOpt,
    api_for,
    memory_app,
    print_json,
    settings_for,
)

__all__: list[str] = []


@memory_app.command("show")
def show(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Print SOUL.md, USER.md and memory/MEMORY.md."""
    files = api_for(settings_for(workspace)).memory_files()
    if json_out:
        print_json(files)
        return
    for name, text in files.items():
        sys.stdout.write(f"==> {name} <==\n{text.rstrip() or '(empty)'}\n\n")


@memory_app.command("history")
def history(
    workspace: WorkspaceOpt = None,
    pending: Annotated[bool, Option("--pending", help="Only entries Dream has not processed.")] = False,
    session: Annotated[str | None, Option("--session", "-s", help="Only this session's entries.")] = None,
    limit: Annotated[int, Option("--limit", "-n", help="Newest N entries (0 = all).")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """The archive of summarised conversation.

    memory/history.jsonl and the entries Dream processed, in memory/history.archive.jsonl,
    then the messages of any session still waiting to be archived, and why. With --pending:
    what waits for Dream, and why."""
    view = api_for(settings_for(workspace)).history(pending=pending, session=session, limit=limit)
    entries, waiting = view.entries, view.waiting
    if json_out:
        print_json([{**e.to_dict(), "pending": view.pending(e), "waiting": waiting(e.cursor)} for e in entries])
        return
    archives = [w.describe() for w in view.archives]  # messages not archived yet, and why
    if not entries:
        sys.stdout.write("No history entries" + (" pending." if pending else " yet.") + "\n")
        sys.stdout.write("".join(f"{line}\n" for line in archives))
        return
    for e in entries:
        mark = "*" if view.pending(e) else " "
        where = e.session_key or "-"
        if e.source:  # the messages it summarises; their session is named once
            span = f"#{e.source.start}-{e.source.end - 1}"
            same = e.source.session == e.session_key or not e.session_key
            where = f"{e.source.session}{span}" if same else f"{where}, {e.source.session}{span}"
        sys.stdout.write(f"{mark}#{e.cursor} [{e.timestamp}] ({where})\n")
        for line in e.content.splitlines():
            sys.stdout.write(f"    {line}\n")
        why = waiting(e.cursor)
        if pending and why:
            sys.stdout.write(f"    (waiting: {why})\n")
    sys.stdout.write("(* = waiting for Dream)\n")
    sys.stdout.write("".join(f"{line}\n" for line in archives))


@memory_app.command("search")
def search(
    query: Annotated[str, Argument(help="Words to look for (any language).")],
    workspace: WorkspaceOpt = None,
    k: Annotated[int, Option("--k", help="Number of results.")] = 8,
    explain: Annotated[
        bool, Option("--explain", help="Show each hit's BM25, vector and final score.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Search history, every session and the memory files.

    By words, and by meaning too when recall.embeddings is configured."""
    from hippobot.agent.api import format_explained, format_hits, hits_to_json

    api = api_for(settings_for(workspace))
    found = api.search(query, k=k, explain=explain)
    hits, left = found.hits, found.unembedded
    if found.warning:
        sys.stderr.write(f"warning: {found.warning}\n")
    elif left:
        sys.stderr.write(
            f"note: {left} documents have no vector yet and are found by their words only; "
            "`hippobot memory reindex` embeds them all\n"
        )
    if json_out:
        print_json(json.loads(api.scrub(json.dumps(hits_to_json(hits)))))
        return
    # Also covers an index written before keys were redacted from it.
    text = (format_explained(hits) if explain else format_hits(hits)) if hits else "No matches."
    sys.stdout.write(api.scrub(text) + "\n")


@memory_app.command("reindex")
def reindex(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Rebuild the search index from the files.

    The index is derived state; with semantic recall configured, every document is embedded
    again."""
    done = api_for(settings_for(workspace)).reindex()
    stats = done.stats
    if json_out and not done.semantic:
        print_json(asdict(stats))
        return
    if not json_out:
        sys.stdout.write(f"reindexed: {stats.describe()}\n")
    if not done.semantic:
        return

    def progress(embedded: int, left: int) -> None:
        sys.stderr.write(f"embedding… {embedded} done, {left} to go\n")

    embedded = done.embed_all(progress)
    warning = done.warning()
    if json_out:
        print_json({**asdict(stats), "embedded": embedded, "warning": warning})
    if warning:
        sys.stderr.write(f"error: {warning}\n")
        sys.exit(1)
    if not json_out:
        sys.stdout.write(f"embedded: {embedded} documents\n")


@memory_app.command("log")
def log(
    sha: Annotated[str | None, Argument(help="Commit (prefix); default: the latest change.")] = None,
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a memory version as a diff.

    The latest change by default, or the commit SHA (a prefix is enough)."""
    from hippobot.agent.api import SHELL_HINTS, commit_json, format_log

    commit = api_for(settings_for(workspace)).version(sha)
    if json_out:
        print_json(commit_json(commit) if commit else None)
        return
    sys.stdout.write(format_log(commit, SHELL_HINTS) + "\n")


@memory_app.command("restore")
def restore(
    sha: Annotated[str | None, Argument(help="Commit (prefix) to undo; omit to list versions.")] = None,
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Undo one memory change, keeping later edits.

    The undo is a new commit.

    The lines it takes out are remembered in memory/reverted.jsonl, so Dream does not add them
    again unless a later conversation states them.
    """
    from hippobot.agent.api import (
        SHELL_HINTS,
        commit_json,
        format_restore,
        format_versions,
        restore_json,
    )

    api = api_for(settings_for(workspace))
    if sha is None:
        found = api.versions()
        if json_out:
            print_json([commit_json(v) for v in found])
        else:
            sys.stdout.write(format_versions(found, SHELL_HINTS) + "\n")
        return
    result = api.restore(sha)
    if json_out:
        print_json(restore_json(result))
    else:
        sys.stdout.write(format_restore(result, sha) + "\n")
