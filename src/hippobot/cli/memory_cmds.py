"""``hippobot memory show|history|search|reindex|log|restore``."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from hippobot.cli.main import JsonOpt, WorkspaceOpt, _agent, _print_json, _settings, memory_app
from hippobot.errors import StorageError

__all__: list[str] = []


@memory_app.command("show")
def show(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Print SOUL.md, USER.md and memory/MEMORY.md."""
    from hippobot.memory.store import MemoryStore

    store = MemoryStore(_settings(workspace).workspace)
    files = {"SOUL.md": store.read_soul(), "USER.md": store.read_user(), "memory/MEMORY.md": store.read_memory()}
    if json_out:
        _print_json(files)
        return
    for name, text in files.items():
        sys.stdout.write(f"==> {name} <==\n{text.rstrip() or '(empty)'}\n\n")


@memory_app.command("history")
def history(
    workspace: WorkspaceOpt = None,
    pending: Annotated[bool, typer.Option("--pending", help="Only entries Dream has not processed.")] = False,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session's entries.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Newest N entries (0 = all).")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """The archive of summarised conversation (memory/history.jsonl and the entries Dream
    processed, in memory/history.archive.jsonl). With --pending: what waits for Dream, and why."""
    from hippobot.lifecycle.dream import read_pending_reasons
    from hippobot.memory.store import MemoryStore

    ws = _settings(workspace).workspace
    store = MemoryStore(ws)
    dream_cursor = store.dream_cursor()
    after = dream_cursor if pending else 0
    entries = store.read_history(after=after, session_key=session)
    if not pending:
        live = {e.cursor for e in entries}
        older = [e for e in store.read_archive() if e.cursor not in live]
        if session is not None:
            older = [e for e in older if e.session_key == session]
        entries = older + entries
    if limit:
        entries = entries[-limit:]
    held = read_pending_reasons(ws)

    def waiting(cursor: int) -> str | None:
        if cursor <= dream_cursor:
            return None
        for h in held:
            if h.first <= cursor <= h.last:
                return h.reason
        return "not processed yet: Dream has not run since it was archived"

    if json_out:
        _print_json([{**e.to_dict(), "pending": e.cursor > dream_cursor, "waiting": waiting(e.cursor)} for e in entries])
        return
    if not entries:
        sys.stdout.write("No history entries" + (" pending." if pending else " yet.") + "\n")
        return
    for e in entries:
        mark = "*" if e.cursor > dream_cursor else " "
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


_SEARCH_FILL = 64  # documents a search may embed first (about a second with the local model)


@contextlib.contextmanager
def _index_errors(path: Path) -> Iterator[None]:
    """A full or read-only disk under the search index: one line, not a traceback."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StorageError(
            f"the search index {path} cannot be used ({exc}); free disk space or make the "
            "workspace writable, then run `hippobot memory reindex`"
        ) from None


@memory_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="Words to look for (any language).")],
    workspace: WorkspaceOpt = None,
    k: Annotated[int, typer.Option("--k", help="Number of results.")] = 8,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show each hit's BM25, vector and final score.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Search history, every session and the memory files (by meaning too, when
    recall.embeddings is configured)."""
    from hippobot.recall.embedders import open_index
    from hippobot.recall.tools import format_explained, format_hits, hits_to_json
    from hippobot.redact import redact_exact

    settings = _settings(workspace)
    secrets = settings.secrets()
    index = open_index(settings)  # syncs itself before searching
    left = 0
    with _index_errors(index.path):
        if index.semantic:  # a few of the newest documents still without a vector: embed now
            left = index.embed_pending(max_docs=_SEARCH_FILL).pending
        hits = index.search(query, k=k, explain=explain)
    warning = index.take_semantic_warning()
    if warning:
        sys.stderr.write(f"warning: {warning}\n")
    elif left:
        sys.stderr.write(
            f"note: {left} documents have no vector yet and are found by their words only; "
            "`hippobot memory reindex` embeds them all\n"
        )
    if json_out:
        _print_json(json.loads(redact_exact(json.dumps(hits_to_json(hits)), secrets)))
        return
    # Also covers an index written before keys were redacted from it.
    text = (format_explained(hits) if explain else format_hits(hits)) if hits else "No matches."
    sys.stdout.write(redact_exact(text, secrets) + "\n")


@memory_app.command("reindex")
def reindex(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Rebuild the search index from the files (it is derived state), and with semantic
    recall configured, embed every document."""
    from hippobot.recall.embedders import open_index

    index = open_index(_settings(workspace), auto_sync=False)
    with _index_errors(index.path):
        stats = index.rebuild()
    if json_out and not index.semantic:
        _print_json(asdict(stats))
        return
    if not json_out:
        sys.stdout.write(f"reindexed: {stats.describe()}\n")
    if not index.semantic:
        return
    embedded = 0
    while True:
        fill = index.embed_pending(max_docs=512)
        embedded += fill.embedded
        if fill.pending:
            sys.stderr.write(f"embedding… {embedded} done, {fill.pending} to go\n")
        if not fill.pending or not fill.embedded:
            break
    warning = index.take_semantic_warning()
    if json_out:
        _print_json({**asdict(stats), "embedded": embedded, "warning": warning})
    if warning:
        sys.stderr.write(f"error: {warning}\n")
        raise typer.Exit(1)
    if not json_out:
        sys.stdout.write(f"embedded: {embedded} documents\n")


@contextlib.contextmanager
def _list_hint() -> Iterator[None]:
    """An unknown version names the shell command that lists them."""
    from hippobot.memory.gitstore import UnknownCommit

    try:
        yield
    except UnknownCommit as exc:
        raise UnknownCommit(f"{exc}; list them with `hippobot memory restore`") from None


@memory_app.command("log")
def log(
    sha: Annotated[str | None, typer.Argument(help="Commit (prefix); default: the latest change.")] = None,
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a memory version as a diff (the latest Dream change by default)."""
    from hippobot.lifecycle.versions import SHELL_HINTS, commit_json, format_log, log_data

    with _list_hint():
        commit = log_data(_agent(_settings(workspace)).git, sha)
    if json_out:
        _print_json(commit_json(commit) if commit else None)
        return
    sys.stdout.write(format_log(commit, SHELL_HINTS) + "\n")


@memory_app.command("restore")
def restore(
    sha: Annotated[str | None, typer.Argument(help="Commit (prefix) to undo; omit to list versions.")] = None,
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Undo exactly one memory change as a new commit, keeping later edits.

    The lines it takes out are remembered in memory/reverted.jsonl, so Dream does not add them
    again unless a later conversation states them.
    """
    from hippobot.lifecycle import versions

    bot = _agent(_settings(workspace))
    if sha is None:
        found = versions.versions_data(bot.git)
        if json_out:
            _print_json([versions.commit_json(v) for v in found])
        else:
            sys.stdout.write(versions.format_versions(found, versions.SHELL_HINTS) + "\n")
        return
    with _list_hint():
        result = versions.restore_data(bot.git, sha, after_cursor=bot.memory.last_cursor())
    if json_out:
        _print_json(versions.restore_json(result))
    else:
        sys.stdout.write(versions.format_restore(result, sha) + "\n")
