"""The read-only memory page at ``GET /``: one plain HTML document, no scripts, no build.

It is sent with a Content-Security-Policy (:data:`PAGE_HEADERS`) that allows exactly the
page's own stylesheet (by its hash) and forms that post back to the server: no script,
image, frame or other origin, so even text that escaped :func:`html.escape` could run
nothing and send nothing anywhere.

It shows what the agent remembers, the way a person would inspect the files: SOUL.md,
USER.md and memory/MEMORY.md, the other files that shape the prompt (AGENTS.md, skills/,
prompts/), the history timeline (newest first, entries Dream has not
processed yet marked *pending*), and the memory versions with their diffs. The memory and
prompt files are rendered as Markdown by :mod:`hippobot.server.markdown` (raw HTML in them
shown as text, no images, only http/https/mailto links); every other piece of workspace text
is escaped with :func:`html.escape`. Nothing on the page can change a file, and it has no
scripts or event handlers.

A plain GET form (``/?q=...``) searches the same recall index as ``memory_search`` and
``hippobot memory search`` (words, and meaning when ``recall.embeddings`` is configured) in
the asking user's workspace; the results come first, with where each hit is from and
whether its words or its meaning matched. The only thing a search writes is the derived
index (``.hippobot/recall.sqlite3``): it syncs with the files and embeds a few pending
documents, as the command does.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import HTMLResponse

from hippobot.lazy_regex import lazy_compile
from hippobot.safeio import read_text
from hippobot.server.markdown import render_markdown

if TYPE_CHECKING:
    from hippobot.agent.api import Api
    from hippobot.memory.history import HistoryEntry
    from hippobot.recall.query import Hit

__all__ = ["PAGE_HEADERS", "index", "render_login", "render_page"]

log = logging.getLogger(__name__)

HISTORY_LIMIT = 200
VERSION_LIMIT = 30
QUERY_MAX_CHARS = 500
SEARCH_RESULTS = 10

_CSS = """
body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.15rem;border-bottom:1px solid #ccc;margin-top:2rem}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
.meta{color:#666;font-size:.85rem}.pending{color:#a60;font-weight:600}
.entry{margin:.8rem 0}.add{color:#075e07}.del{color:#a00}.hunk{color:#059}
details{margin:.5rem 0}summary{cursor:pointer}nav a{margin-right:1rem}
.error{color:#a00;font-weight:600}.how{color:#075e07;font-weight:600}
form[role=search]{margin:1rem 0}form[role=search] input{width:60%;max-width:30rem}
.md{border-left:3px solid #e4e4e4;padding:0 .8rem;margin:.5rem 0}.md h4,.md h5,.md h6{margin:.8rem 0 .3rem}
.md code{background:#f6f6f6;padding:0 .2rem}.md pre code{padding:0}
.md table{border-collapse:collapse}.md td,.md th{border:1px solid #ddd;padding:.2rem .5rem}
"""


_CSS_HASH = base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode("ascii")
#: Headers of every HTML page the server sends (the memory page and its login form).
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_CSS_HASH}'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # a ?token= address never travels to another site in a Referer ("no-referrer" would make
    # the browser send "Origin: null" with the login form, which the Origin check refuses)
    "Referrer-Policy": "same-origin",
}


@dataclass(frozen=True, slots=True)
class _Section:
    anchor: str
    title: str
    body: str  # already-escaped HTML


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>" if text.strip() else "<p class=meta>(empty)</p>"


def _markdown(text: str) -> str:
    if not text.strip():
        return "<p class=meta>(empty)</p>"
    return f"<div class=md>{render_markdown(text)}</div>"


def _files(api: Api) -> _Section:
    parts = [f"<h3>{escape(name)}</h3>{_markdown(text)}" for name, text in api.memory_files().items()]
    return _Section("files", "Memory files", "".join(parts))


_PROMPT_FILE_CHARS = 20_000


def _prompt_files(api: Api) -> _Section:
    """AGENTS.md, skills/ and prompts/: they shape the prompt and are versioned too."""
    parts = []
    for rel, text in api.prompt_files().items():
        if len(text) > _PROMPT_FILE_CHARS:
            text = text[:_PROMPT_FILE_CHARS] + f"\n[... {len(text) - _PROMPT_FILE_CHARS} more chars]"
        parts.append(f"<h3>{escape(rel)}</h3>{_markdown(text) if rel.endswith('.md') else _pre(text)}")
    body = "".join(parts) or "<p class=meta>No AGENTS.md, skills or prompts in the workspace.</p>"
    return _Section("prompt-files", "Prompt files", body)


def _entry(entry: HistoryEntry, pending: bool) -> str:
    meta = [f"#{entry.cursor}", escape(entry.timestamp)]
    if entry.session_key:
        meta.append(escape(entry.session_key))
    if entry.source is not None:
        meta.append(f"messages {entry.source.start}–{entry.source.end}")
    flag = " <span class=pending>pending Dream</span>" if pending else ""
    return f"<div class=entry><div class=meta>{' · '.join(meta)}{flag}</div>{_pre(entry.content)}</div>"


def _history(api: Api) -> _Section:
    view = api.history(limit=HISTORY_LIMIT)  # Dream's archive too: the whole timeline
    entries = view.entries
    if not entries:
        return _Section("history", "History", "<p class=meta>No history entries yet.</p>")
    pending = sum(1 for e in entries if view.pending(e))
    head = f"<p class=meta>{len(entries)} newest entries, {pending} pending Dream.</p>"
    rows = "".join(_entry(e, view.pending(e)) for e in reversed(entries))
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


def _versions(api: Api) -> _Section:
    versions = api.versions(limit=VERSION_LIMIT)
    if not versions:
        state = api.versioning_state()
        if not state.startswith("on "):
            return _Section("versions", "Memory versions", f"<p class=meta>Versioning is {escape(state)}.</p>")
    blocks = []
    for info in versions:
        try:
            shown = api.version(info.sha)
            diff = _diff_html(shown.diff if shown is not None else "")
        except Exception as exc:  # one unreadable commit must not hide the others
            diff = f"<p class=meta>diff unavailable: {escape(str(exc))}</p>"
        summary = f"<code>{escape(info.short_sha)}</code> {escape(info.time)} — {escape(info.subject)}"
        body = _pre(info.message) if "\n" in info.message.strip() else ""
        blocks.append(f"<details><summary>{summary}</summary>{body}{diff}</details>")
    if not blocks:
        return _Section("versions", "Memory versions", "<p class=meta>No versions yet.</p>")
    return _Section("versions", "Memory versions (newest first)", "".join(blocks))


# --- search -----------------------------------------------------------------------------

_HEADING = lazy_compile(r"#{1,6}\s+(.+?)\s*#*\s*$")


def _search_form(query: str) -> str:
    return (
        "<form method=get action=/ role=search>"
        "<label for=q>Search memory</label> "
        f"<input id=q name=q type=search value=\"{escape(query)}\" maxlength={QUERY_MAX_CHARS} "
        "placeholder='words or a question'> "
        "<button type=submit>Search</button>"
        "<div class=meta>History, every conversation and the memory files"
        "; by words, and by meaning when semantic recall is configured.</div></form>"
    )


def _section_of(workspace: Path, rel: str, line: int, cache: dict[str, list[str]]) -> str | None:
    """The Markdown heading above ``line`` (1-based) of a memory file, if any."""
    if rel not in cache:
        try:
            cache[rel] = read_text(workspace / rel, within=workspace).splitlines()  # no link out
        except OSError:
            cache[rel] = []
    for text in reversed(cache[rel][:line]):
        if match := _HEADING.match(text):
            return match.group(1)
    return None


def _where(hit: Hit, workspace: Path, files: dict[str, list[str]]) -> str:
    """Where a hit comes from, in words (plain text, not yet escaped)."""
    if hit.kind == "history":
        number = hit.citation.partition("#")[2]
        chat = f" (conversation {hit.session_key})" if hit.session_key else ""
        return f"history entry #{number}{chat}"
    if hit.kind == "session":
        number = hit.citation.rpartition("#")[2]
        role = f", {hit.role}" if hit.role else ""
        return f"conversation {hit.session_key}, message #{number}{role}"
    rel, _, line = hit.citation.rpartition(":")
    where = f"{rel or hit.source}, line {line}"
    section = _section_of(workspace, hit.source, int(line), files) if line.isdigit() else None
    return f"{where}, section “{section}”" if section else where


def _matched_by(hit: Hit) -> str:
    parts = hit.explain or {}
    words = parts.get("bm25") is not None or not parts
    meaning = parts.get("similarity") is not None
    if words and meaning:
        return "words and meaning"
    return "meaning" if meaning else "words"


def _hit_html(hit: Hit, workspace: Path, files: dict[str, list[str]], clean: Callable[[str], str]) -> str:
    meta = [escape(clean(_where(hit, workspace, files)))]
    if hit.timestamp:
        meta.append(escape(hit.timestamp))
    meta.append(f"matched by <span class=how>{_matched_by(hit)}</span>")
    meta.append(f"<code>{escape(clean(hit.citation))}</code>")
    return f"<div class=entry><div class=meta>{' · '.join(meta)}</div>{_pre(clean(hit.snippet))}</div>"


def _semantic_note(api: Api, warning: str | None, left: int) -> str | None:
    """Why meaning played no or only a partial part in these results, if it did not fully."""
    if warning:
        return warning
    if unavailable := api.semantic_unavailable():
        return unavailable
    if left:
        return (
            f"{left} documents have no vector yet and are found by their words only; "
            "`hippobot memory reindex` embeds them all"
        )
    return None


def _search(api: Api, query: str) -> _Section:
    """The "Search results" section: the recall index's best hits for ``query``."""
    title = "Search results"
    if len(query) > QUERY_MAX_CHARS:
        return _Section("search", title, (
            f"<p class=error role=alert>The search is {len(query)} characters long; "
            f"use at most {QUERY_MAX_CHARS}.</p>"
        ))  # fmt: skip
    clean = api.scrub

    try:
        found = api.search(query, k=SEARCH_RESULTS, explain=True)
        hits = found.hits
        note = _semantic_note(api, found.warning, found.unembedded)
    except Exception as exc:  # a broken index must not take the rest of the page with it
        log.warning("memory page: search failed: %s", exc)
        why = clean(str(exc)) or type(exc).__name__
        return _Section("search", title, (
            f"<p class=error role=alert>Search is unavailable: {escape(why)} "
            "(<code>hippobot memory reindex</code> rebuilds the index).</p>"
        ))  # fmt: skip
    head = f"<p class=meta>{escape(clean(note))}</p>" if note else ""
    if not hits:
        return _Section("search", title, f"{head}<p>No matches.</p>")
    files: dict[str, list[str]] = {}
    rows = "<div class=hits>" + "".join(_hit_html(h, api.workspace, files, clean) for h in hits) + "</div>"
    many = f"{len(hits)} best matches" if len(hits) > 1 else "1 match"
    count = f"<p class=meta>{many} for “{escape(clean(query))}”.</p>"
    return _Section("search", title, head + count + rows)


def _guarded(title: str, anchor: str, build: Callable[[], _Section]) -> _Section:
    try:
        return build()
    except Exception as exc:  # show the rest of the page even if one part is unreadable
        log.warning("memory page: %s could not be read: %s", title, exc)
        return _Section(anchor, title, f"<p class=meta>could not be read: {escape(str(exc))}</p>")


def render_page(api: Api, query: str | None = None) -> str:
    """The whole page as a string (blocking file and git reads: call from a thread).

    With a non-blank ``query`` the page starts with its search results.
    """
    query = query or ""
    sections = [_search(api, query.strip())] if query.strip() else []
    sections += [
        _guarded("Memory files", "files", lambda: _files(api)),
        _guarded("Prompt files", "prompt-files", lambda: _prompt_files(api)),
        _guarded("History", "history", lambda: _history(api)),
        _guarded("Memory versions", "versions", lambda: _versions(api)),
    ]
    nav = "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections)
    body = "".join(f'<h2 id="{s.anchor}">{escape(s.title)}</h2>{s.body}' for s in sections)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>hippobot memory</title><style>{_CSS}</style></head><body>"
        f"<h1>hippobot memory</h1><p class=meta>workspace {escape(str(api.workspace))} · "
        "read-only view</p>"
        f"{_search_form(query)}<nav>{nav}</nav>{body}</body></html>"
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
    from hippobot.agent.api import Api
    from hippobot.server.users import request_agent  # the asking user's workspace, only

    api = Api.for_agent(await request_agent(request))
    page = await asyncio.to_thread(render_page, api, request.query_params.get("q"))
    return HTMLResponse(page, headers=PAGE_HEADERS)
