"""``hippobot sessions list|show|delete``: conversations as a person reads them."""

# No ``from __future__ import annotations`` here: see the note in cli/_app.py.

import sys
from dataclasses import asdict
from typing import Annotated, Any

from hippobot.cli._app import Argument, Option, confirm
from hippobot.cli._common import (
    JsonOpt,
    WorkspaceOpt,
    api_for,
    print_json,
    sessions_app,
    settings_for,
)
from hippobot.errors import UserError
from hippobot.messages import Message, public_text

__all__ = ["public_messages"]


def public_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages with runtime context stripped and bookkeeping removed (for people)."""
    out = []
    for index, m in enumerate(messages):
        item: dict[str, Any] = {"index": index, "role": m.get("role"), "text": public_text(m)}
        if m.get("timestamp"):
            item["timestamp"] = m["timestamp"]
        if m.get("tool_calls"):
            item["tool_calls"] = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in m["tool_calls"]
            ]
        if m.get("name"):
            item["name"] = m["name"]
        if m.get("media"):
            item["media"] = list(m["media"])
        if m.get("_command"):
            item["command"] = True
        out.append(item)
    return out


@sessions_app.command("list")
def list_sessions(
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
    show_all: Annotated[bool, Option("--all", help="Include nanobot's internal Dream sessions.")] = False,
) -> None:
    """List conversations, newest first."""
    found = api_for(settings_for(workspace)).sessions(include_internal=show_all)
    infos, hidden = found.shown, found.hidden
    if json_out:
        print_json([{**asdict(i), "path": str(i.path)} for i in infos])
        return
    if not infos and not hidden:
        sys.stdout.write("No sessions yet. Start one with `hippobot agent`.\n")
        return
    for i in infos:
        when = (i.updated_at or "")[:16].replace("T", " ")
        # After /new the row counts the fresh conversation and names what came before,
        # so it adds up to what `sessions show` prints.
        earlier = f" (+{i.earlier_count} before /new)" if i.earlier_count else ""
        sys.stdout.write(f"{i.key:<28} {i.message_count:>6} msgs{earlier}  {when:<16}  {i.preview}\n")
    if hidden:
        sys.stdout.write(f"({hidden} internal nanobot Dream session(s) hidden; --all shows them)\n")


@sessions_app.command("show")
def show_session(
    key: Annotated[str, Argument(help="Session key, e.g. cli:direct.")],
    workspace: WorkspaceOpt = None,
    json_out: JsonOpt = False,
    last: Annotated[int, Option("--last", help="Only the last N messages (0 = all).")] = 0,
) -> None:
    """Show a conversation (runtime metadata stripped)."""
    session = api_for(settings_for(workspace)).session(key)
    fresh = min(session.fresh_start, len(session.messages))
    items = public_messages(session.messages)
    if last > 0:
        items = items[-last:]
    if json_out:
        print_json({
            "key": session.key, "created_at": session.created_at, "updated_at": session.updated_at,
            "last_consolidated": session.last_consolidated, "fresh_start": fresh, "messages": items,
        })
        return
    marker = f"--- /new: the {fresh} messages above are {_archived(session)} ---\n" if fresh else ""
    for item in items:
        if marker and item["index"] == fresh:
            sys.stdout.write(marker)
        role = str(item["role"])
        if item.get("tool_calls"):
            for call in item["tool_calls"]:
                sys.stdout.write(f"[{item['index']}] {role}: → {call['name']}({call['arguments'][:120]})\n")
            if not item["text"]:
                continue
        text = item["text"] if role != "tool" else item["text"][:500]
        sys.stdout.write(f"[{item['index']}] {role}: {text}\n")
    if marker and fresh == len(session.messages):  # nothing said since the /new yet
        sys.stdout.write(marker)


def _archived(session: Any) -> str:
    wait = session.archive_wait()
    if wait is None:
        return "archived to memory"
    return f"not all archived yet ({wait.describe()})"


@sessions_app.command("delete")
def delete_session(
    key: Annotated[str, Argument(help="Session key to delete.")],
    workspace: WorkspaceOpt = None,
    yes: Annotated[bool, Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete a conversation file.

    History entries already archived from it stay."""
    if not yes:
        if not sys.stdin.isatty():
            raise UserError(f"refusing to delete {key!r} without confirmation: pass --yes")
        confirm(f"Delete session {key}?")
    import asyncio  # not at the top: --help and most commands never need it
    asyncio.run(api_for(settings_for(workspace)).delete_session(key))
    if json_out:
        print_json({"deleted": key})
        return
    sys.stdout.write(f"deleted {key}\n")
