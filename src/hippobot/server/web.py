"""The read-only memory page at ``GET /``: one plain HTML document, no scripts, no build.

It shows what the agent remembers, the way a person would inspect the files: SOUL.md,
USER.md and memory/MEMORY.md, the history timeline (newest first, entries Dream has not
processed yet marked *pending*), and the memory versions with their diffs. Every piece of
workspace text is escaped with :func:`html.escape`; nothing on the page can change a file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import HTMLResponse

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent
    from hippobot.memory.history import HistoryEntry

__all__ = ["index", "render_login", "render_page"]

log = logging.getLogger(__name__)

HISTORY_LIMIT = 200
VERSION_LIMIT = 30

_CSS = """
body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.15rem;border-bottom:1px solid #ccc;margin-top:2rem}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
.meta{color:#666;font-size:.85rem}.pending{color:#a60;font-weight:600}
.entry{margin:.8rem 0}.add{color:#075e07}.del{color:#a00}.hunk{color:#059}
details{margin:.5rem 0}summary{cursor:pointer}nav a{margin-right:1rem}
.error{color:#a00;font-weight:600}
"""


@dataclass(frozen=True, slots=True)
class _Section:
    anchor: str
    title: str
    body: str  # already-escaped HTML


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>" if text.strip() else "<p class=meta>(empty)</p>"


def _files(agent: Agent) -> _Section:
    parts = []
    for name, read in (
        ("SOUL.md", agent.memory.read_soul),
        ("USER.md", agent.memory.read_user),
        ("memory/MEMORY.md", agent.memory.read_memory),
    ):
        parts.append(f"<h3>{escape(name)}</h3>{_pre(read())}")
    return _Section("files", "Memory files", "".join(parts))


def _entry(entry: HistoryEntry, pending: bool) -> str:
    meta = [f"#{entry.cursor}", escape(entry.timestamp)]
    if entry.session_key:
        meta.append(escape(entry.session_key))
    if entry.source is not None:
        meta.append(f"messages {entry.source.start}–{entry.source.end}")
    flag = " <span class=pending>pending Dream</span>" if pending else ""
    return f"<div class=entry><div class=meta>{' · '.join(meta)}{flag}</div>{_pre(entry.content)}</div>"


def _history(agent: Agent) -> _Section:
    entries = agent.memory.read_history(limit=HISTORY_LIMIT)
    if not entries:
        return _Section("history", "History", "<p class=meta>No history entries yet.</p>")
    dream_cursor = agent.memory.dream_cursor()
    pending = sum(1 for e in entries if e.cursor > dream_cursor)
    head = f"<p class=meta>{len(entries)} newest entries, {pending} pending Dream.</p>"
    rows = "".join(_entry(e, e.cursor > dream_cursor) for e in reversed(entries))
    return _Section("history", "History", head + rows)


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        css = ""
        if line.startswith(("+++", "---")):
            pass  # file header lines, not changes
        elif line.startswith("+"):
            css = "add"
        elif line.startswith("-"):
            css = "del"
        elif line.startswith("@@"):
            css = "hunk"
        text = escape(line)
        lines.append(f"<span class={css}>{text}</span>" if css else text)
    return "<pre>" + "\n".join(lines) + "</pre>" if lines else "<p class=meta>(no diff)</p>"


def _versions(agent: Agent) -> _Section:
    git = agent.git
    if not git.initialized or not git.available:
        why = escape(agent.versioning_state())
        return _Section("versions", "Memory versions", f"<p class=meta>Versioning is {why}.</p>")
    blocks = []
    for info in git.log(limit=VERSION_LIMIT):
        try:
            diff = _diff_html(git.show(info.sha).diff)
        except Exception as exc:  # one unreadable commit must not hide the others
            diff = f"<p class=meta>diff unavailable: {escape(str(exc))}</p>"
        summary = f"<code>{escape(info.short_sha)}</code> {escape(info.time)} — {escape(info.subject)}"
        body = _pre(info.message) if "\n" in info.message.strip() else ""
        blocks.append(f"<details><summary>{summary}</summary>{body}{diff}</details>")
    if not blocks:
        return _Section("versions", "Memory versions", "<p class=meta>No versions yet.</p>")
    return _Section("versions", "Memory versions (newest first)", "".join(blocks))


def _guarded(title: str, anchor: str, build: Callable[[], _Section]) -> _Section:
    try:
        return build()
    except Exception as exc:  # show the rest of the page even if one part is unreadable
        log.warning("memory page: %s could not be read: %s", title, exc)
        return _Section(anchor, title, f"<p class=meta>could not be read: {escape(str(exc))}</p>")


def render_page(agent: Agent) -> str:
    """The whole page as a string (blocking file and git reads: call from a thread)."""
    sections = [
        _guarded("Memory files", "files", lambda: _files(agent)),
        _guarded("History", "history", lambda: _history(agent)),
        _guarded("Memory versions", "versions", lambda: _versions(agent)),
    ]
    nav = "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections)
    body = "".join(f'<h2 id="{s.anchor}">{escape(s.title)}</h2>{s.body}' for s in sections)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>hippobot memory</title><style>{_CSS}</style></head><body>"
        f"<h1>hippobot memory</h1><p class=meta>workspace {escape(str(agent.workspace))} · "
        "read-only view</p>"
        f"<nav>{nav}</nav>{body}</body></html>"
    )


def render_login(error: str | None = None) -> str:
    """The login form shown at ``/`` to a browser without the login cookie.

    It posts the token to ``/login`` (a same-origin form), which sets the cookie and sends
    the browser back to ``/``. No scripts: the page works with JavaScript off.
    """
    problem = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>hippobot memory: log in</title><style>{_CSS}</style></head><body>"
        "<h1>hippobot memory</h1>"
        "<p>Log in with the token <code>hippobot serve</code> printed when it started "
        "(also in <code>serve-token</code> in the hippobot home), or with the server's "
        "<code>serve.apiKey</code>. This browser then stays logged in.</p>"
        f"{problem}"
        "<form method=post action=/login>"
        "<label for=token>Token</label> "
        "<input id=token name=token type=password autocomplete=current-password required autofocus> "
        "<button type=submit>Log in</button></form></body></html>"
    )


async def index(request: Request) -> HTMLResponse:
    from hippobot.server.users import request_agent  # the asking user's workspace, only

    agent = await request_agent(request)
    page = await asyncio.to_thread(render_page, agent)
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})
