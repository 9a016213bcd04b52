"""The model's recall tools (``memory_search``, ``memory_get``) and hit formatting.

The tools are bound to one session: hits from other chats are labelled
``[other session <key>]`` and, when the session is configured not to see other chats,
left out entirely (search and get alike).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Literal

from hippobot.errors import ToolError
from hippobot.tools.base import Tool, ToolResult

from .auto import asks_about_the_user, recalled_citation
from .index import RecallIndex
from .query import Hit, ParsedQuery, RecallError, parse_citation, parse_query, terms_said

__all__ = ["format_explained", "format_hit", "format_hits", "hits_to_json", "recall_tools"]

_MAX_K = 20
_GET_HINT = "Read more with memory_get(citation)."


def format_hit(hit: Hit) -> str:
    """One line: ``[citation] [other session KEY] time role: snippet``."""
    parts = [f"[{hit.citation}]"]
    if hit.other_session and hit.session_key:
        parts.append(f"[other session {hit.session_key}]")
    if hit.timestamp:
        parts.append(hit.timestamp)
    text = f"{hit.role}: {hit.snippet}" if hit.role else hit.snippet
    parts.append(text)
    return " ".join(parts)


def format_hits(hits: list[Hit]) -> str:
    """Compact text for the model or a terminal: one hit per line, best first."""
    if not hits:
        return "No matches."
    return "\n".join(format_hit(h) for h in hits)


def format_explained(hits: list[Hit]) -> str:
    """Each hit, then how its score was made (``memory search --explain``)."""
    lines = []
    for hit in hits:
        lines.append(format_hit(hit))
        parts = hit.explain or {}
        bm25 = parts.get("bm25")
        sim = parts.get("similarity")
        meaning = parts.get("meaning")
        context = parts.get("context")
        own = parts.get("cover") or 0.0
        near = max(parts.get("cover_near") or 0.0, parts.get("cover_wide") or 0.0)
        keyword = (
            f"bm25 {bm25:.4f} (#{parts.get('bm25_rank')}) words {parts.get('words', 0):.2f}"
            if bm25 is not None else "bm25 -"
        )  # fmt: skip
        vector = f"vector {sim:.4f} (#{parts.get('vector_rank')})" if sim is not None else "vector -"
        extra = f"  meaning {meaning:+.2f} sd" if meaning is not None else ""
        if near > own or (context is not None and context > 0):
            extra += f"  with its neighbours: words {near:.2f}"
            extra += f", meaning {context:+.2f} sd" if context is not None else ""
        extra += "  names the speaker" if parts.get("speaker") else ""
        extra += "  in the period asked" if parts.get("dated") else ""
        lines.append(f"    {keyword}  {vector}{extra}  score {hit.score:.6f}")
    return "\n".join(lines)


def hits_to_json(hits: list[Hit]) -> list[dict[str, Any]]:
    """Plain dicts for ``--json`` output (stable keys, JSON-serialisable)."""
    return [asdict(h) for h in hits]


_IN_VIEW_EXTRA = 6  # hits asked for beyond k, in place of those the model has in view


def _in_view(hit: Hit, session_key: str, replayed_from: int) -> bool:
    """Whether ``hit`` is a message of this conversation that the request replays."""
    cited = parse_citation(hit.citation)
    return cited is not None and cited.kind == "session" and cited.session_key == session_key and (
        cited.number >= replayed_from
    )


def _recalled_listing(recalled: list[str]) -> str:
    listed = "\n".join(recalled)
    return f"The memory recalled for the user's message is in its runtime context:\n{listed}\n"


def _lead_with_the_asked(result: str, query: ParsedQuery | None, *, only_the_asked: bool = False) -> str:
    """A history entry with its lines about the user's message first, or, with
    ``only_the_asked``, those lines alone.

    An entry summarises a conversation, a fact a line, and a small model answers from the
    first fact it reads: expanding the summary recalled for "What is my locker code at
    work?", the local model answered with its first line ("I have a cat named Luna"), and
    with a line about the locker code above the whole entry, with the entry's first line
    again ("I live in Osaka now"). The lines that say most of what was asked lead now,
    each with the lines under it, the others after in their order.

    Led by the locker code, the same model still answered with a later line in four runs
    of four ("I live in Osaka now", "I moved.", "I work at Initech as a nurse"). For a
    question about the user (``only_the_asked``) a summary's other lines are other facts,
    as a session's other messages are: the lines that say most of the question are shown
    alone, and the first line counts those left out. An entry no line of which says the
    question's words is shown whole."""
    head, sep, body = result.partition("\n")
    if not sep or not head.startswith("history#") or query is None:
        return result
    items: list[list[str]] = []
    for line in body.split("\n"):
        if items and not line.lstrip().startswith(("-", "*")) and line[:1].isspace():
            items[-1].append(line)  # a note under a fact ("  (the user's own words ...)")
        else:
            items.append([line])
    # (terms matched, of those as the very word): the rule best_lines picks an entry's
    # recalled lines by, so what is recalled and what memory_get leads with agree
    said = [terms_said(item[0], query) for item in items]
    if not any(matched for matched, _exact in said):
        return result
    if only_the_asked:
        best = max(said)
        kept = [item for item, key in zip(items, said, strict=True) if key == best]
        others = len(items) - len(kept)
        if others:
            what = "line" if len(kept) == 1 else "lines"
            left_out = f"{others} other line{'s' if others > 1 else ''}, about other things, left out"
            lines = [line for item in kept for line in item]
            return "\n".join([f"{head}, its {what} about the user's message ({left_out}):", *lines])
    order = sorted(range(len(items)), key=lambda i: (-said[i][0], -said[i][1]))
    lines = [line for i in order for line in items[i]]
    return "\n".join([f"{head}, its lines about the user's message first:", *lines])


def _back_to_what_was_shown(problem: str, recalled: list[str]) -> str:
    """The result of a citation that does not exist: what the model was shown instead.

    Small models invent citations (or copy one from an example); the way out is the memory
    already in front of them, or a search that prints real citations."""
    if recalled:
        return (
            f"{problem}. Use only citations you were shown. {_recalled_listing(recalled)}"
            "Answer from it, or call memory_search to find more."
        )
    return (
        f"{problem}. Use only a citation exactly as memory_search printed it: call "
        "memory_search first."
    )


def recall_tools(
    index: RecallIndex,
    *,
    session_key: str,
    include_other_sessions: bool = True,
    recalled: Callable[[], list[str]] | None = None,
    replayed_from: Callable[[], int] | None = None,
    asked: Callable[[], str] | None = None,
) -> list[Tool]:
    """``memory_search`` and ``memory_get`` bound to ``index`` and the current session.

    ``recalled`` gives the lines recalled for the session's latest message (recall before
    answering): a citation that does not exist is answered with them. ``replayed_from``
    gives the first message of the session the request surely replays: search leaves
    those out. The local model, searching for the garden, was shown its own question, and
    expanded that instead of the answer above it. ``asked`` gives that message's words:
    memory_get shows a history entry's lines about it first."""

    async def memory_search(
        query: str, k: int = 5, scope: Literal["all", "history", "sessions", "memory"] = "all"
    ) -> str | ToolResult:
        """Search everything remembered: archived history, past conversations and the memory
        files. Conversations of every chat count, including messages already summarised;
        each result starts with a citation, which memory_get expands to the full entry.

        Args:
            query: Plain words to look for, in any language; no search syntax needed.
            k: How many results to return (1-20).
            scope: Where to look: all, history (archived summaries), sessions
                (conversation messages) or memory (MEMORY.md, USER.md, SOUL.md).
        """
        wanted = max(1, min(k, _MAX_K))
        shown_from = replayed_from() if replayed_from is not None else None
        try:
            hits = await asyncio.to_thread(
                index.search,
                query,
                k=wanted + (_IN_VIEW_EXTRA if shown_from is not None else 0),
                scope=scope,
                session_key=session_key,
                include_other_sessions=include_other_sessions,
            )
        except RecallError as exc:
            raise ToolError(str(exc)) from exc
        if shown_from is not None:
            hits = [hit for hit in hits if not _in_view(hit, session_key, shown_from)]
        hits = hits[:wanted]
        if not hits:
            # The local model searched "city" for "Which city do I live in?", got no
            # match, and said it did not know, with "I live in Osaka now" recalled in
            # front of it: the way back to that memory is named.
            shown = recalled() if recalled is not None else []
            if shown:
                return f"No matches for {query!r}. {_recalled_listing(shown)}Answer from it, or search other words."
            return ToolResult(f"No matches for {query!r}.", found_nothing=True)
        return f"{format_hits(hits)}\n{_GET_HINT}"

    async def memory_get(citation: str, around: int = 3) -> str:
        """Expand a citation you were shown (by memory_search or with recalled memory) to its
        full text. That is the whole history entry, the conversation messages around a
        session message, or the lines around a memory-file line.

        Args:
            citation: A citation copied exactly from a result you were shown (the text in
                its first brackets); never make one up.
            around: How many messages (or lines) to show on each side (0-20).
        """
        message = asked() if asked is not None else ""
        query = parse_query(message) if message.strip() else None
        about_the_user = query is not None and asks_about_the_user(query, message)

        # Asked about the user ("What is my cat called?"), the cited message alone: what
        # the user said answers. Beside it, the local model copied the reply next to it ("I
        # apologize, but I don't have enough information ..."), and with the replies left
        # out, answered the user's next message ("a quick pasta recipe") instead, 3 of 6.
        width = 0 if about_the_user else max(0, min(around, 20))

        def get(cite: str) -> str:
            found = index.get(
                cite, width, session_key=session_key, include_other_sessions=include_other_sessions,
            )  # fmt: skip
            return _lead_with_the_asked(found, query, only_the_asked=about_the_user)

        try:
            return await asyncio.to_thread(get, citation)
        except RecallError as exc:
            shown = recalled() if recalled is not None else []
            # What a recalled line says, passed as its citation: the model decided which
            # memory to read; the line it quotes tells the code where that memory is.
            quoted = recalled_citation(citation, shown)
            if quoted is not None:
                with contextlib.suppress(RecallError):
                    return f"({citation!r} is what {quoted} says.)\n" + await asyncio.to_thread(get, quoted)
            raise ToolError(_back_to_what_was_shown(str(exc).rstrip("."), shown)) from exc

    return [Tool.from_function(memory_search), Tool.from_function(memory_get)]
