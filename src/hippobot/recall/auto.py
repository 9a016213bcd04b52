"""Recall before answering: the memory that rides on a user message (SPEC 4.1, point 6).

For each user message the agent searches memory itself, with the same ranking as the
model's ``memory_search``, and adds the few best hits that clear a relevance bar to the
message's runtime context (:func:`hippobot.context.runtime.runtime_context_block`). A model
that never calls a tool then still has the fact in front of it, next to the question.

What this module decides:

* **The bar.** ``recall.autoMinScore``, or by default 0.02, with vectors or by keywords
  alone. Chosen on LoCoMo conversations 1-5 (docs/recall.md, ``benchmarks.locomo.autorecall``):
  a bar drops the long tail but a high one drops the answer too. With vectors and the
  current ranking, the share of questions whose recalled hits hold an evidence turn (300
  tokens, 5 hits) is 0.83 with no bar, 0.81 at 0.02 (238 tokens on average instead of 279),
  0.75 at 0.05, 0.63 at 0.1; by keywords (the previous ranking) 0.68 with none, 0.64 at
  0.02, 0.43 at 0.05. Keyword relevance is not calibrated above
  ~0.1, and a workspace of a few messages scores every match low (BM25's idf needs many
  documents), which the low keyword bar also leaves room for.
* **What is already shown** is left out: text the system prompt holds (memory files,
  Recent History), messages of this conversation the request replays, and hits recalled for
  an earlier message that is replayed (its runtime context still lists them).
* **The budget.** At most :data:`MAX_HITS` hits within ``recall.autoTokens``; each hit is one
  line, its text cut to a window around the match.
* **Time.** The turn never waits long for it: a query vector not ready within half of
  ``recall.autoTimeoutS`` is not waited for (keywords only), and a search not done within
  it is dropped for this turn (the thread finishes on its own; its answer is ignored). A
  failure is logged once per kind, never raised.
* **Data, not instructions.** A recalled text may hold what someone else wrote: each hit is
  one fenced line (:func:`~hippobot.context.runtime.quote_untrusted`) under a header that
  says so, inside the block the prompt's tool contract calls metadata.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hippobot.context import tokens
from hippobot.context.runtime import quote_untrusted
from hippobot.factmatch import mentions_old_value
from hippobot.lazy_regex import lazy_compile
from hippobot.memory.facts import split_correction

from .query import ParsedQuery, parse_citation, parse_query, parse_ts, shares_a_word, words_said
from .relative_dates import annotate_relative_dates

if TYPE_CHECKING:
    from .index import RecallIndex
    from .query import Hit

__all__ = [
    "KEYWORD_BAR",
    "MAX_HITS",
    "VECTOR_BAR",
    "AutoRecall",
    "Recalled",
    "Recollection",
    "Shown",
    "recalled_citation",
    "recalled_text",
    "search_text",
]

log = logging.getLogger("hippobot.recall")

VECTOR_BAR = 0.02
KEYWORD_BAR = 0.02
MAX_HITS = 5
_SEARCH_K = 12  # candidates above the bar, before what is already shown is left out
_SNIPPET_CHARS = 280  # about 70 tokens: a message whole, a long entry around its match
# Words of a message searched by keyword: its 8 longest. A search probes every word in every
# table; on a 10,000-message workspace 16 words cost 14 ms of CPU, 8 cost 6.6 ms. LoCoMo's
# questions rarely have more, and the query vector still reads the whole message.
_MAX_TERMS = 8
_SENTENCE_BREAK = lazy_compile(r"(?<=[.!?])\s+|(?<=[？。！])\s*|\n+")


def search_text(message: str) -> str:
    """What of a user message is searched: its questions, when it asks any.

    "How many dogs does Andrew have? Answer with a short phrase, using the exact words of
    the conversations." is a question and how to answer it; searched whole, the second
    sentence's words outnumber the question's and every candidate covers a smaller share
    of them, so relevance falls under the bar (LoCoMo 1-5: an evidence turn among the
    recalled for 0.77 of the bare questions, 0.18 of the same questions asked so). A
    message without a question mark is searched whole.
    """
    sentences = (part.strip() for part in _SENTENCE_BREAK.split(message))
    asked = [part for part in sentences if _asks(part)]
    return " ".join(asked) if asked else message


def _asks(sentence: str) -> bool:
    """Whether one sentence is a question (its "?" may sit inside closing quotes)."""
    return sentence.rstrip("!\"')»” ").endswith(("?", "？"))


_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself"})
_SECOND_PERSON = frozenset({"you", "your", "yours", "yourself"})


def asks_about_the_user(query: ParsedQuery, text: str) -> bool:
    """Whether the message asks about the user in the first person and not about what the
    agent said: "What is my cat called?", "Where do I work?", not "What did you suggest?"
    nor "What did Caroline research?". Such a question is answered by what the user said;
    the agent's own earlier replies at best repeat it."""
    words = query.words
    first = bool(words & _FIRST_PERSON) or "我" in text
    second = bool(words & _SECOND_PERSON) or "你" in text or "您" in text
    return first and not second


class Shown(Protocol):
    """What the request already puts in front of the model (see
    :meth:`hippobot.context.assembler.PromptAssembler.shown`)."""

    def in_prompt(self, text: str) -> bool: ...

    def replays(self, session_key: str | None, number: int) -> bool: ...

    def recalled_before(self, citation: str) -> bool: ...

    def shows_entry(self, cursor: int) -> bool: ...


@dataclass(frozen=True, slots=True)
class Recalled:
    """One hit as it was added to a message."""

    citation: str
    score: float
    line: str  # exactly as it appears in the runtime context
    tokens: int
    role: str | None = None  # who said it, for a session message


@dataclass(slots=True)
class Recollection:
    """What recall added to one message, and why (shown by ``/context``)."""

    hits: list[Recalled] = field(default_factory=list)
    mode: str = "off"  # hybrid | keyword | off | failed | timeout
    bar: float = 0.0
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (citation, why)
    seconds: float = 0.0
    note: str = ""  # why recall did not run in full (a timeout, an error)
    query: str = ""  # the words searched for: the message, as memory_get reads it

    def lines(self) -> list[str]:
        return [h.line for h in self.hits]

    def marker(self) -> dict[str, Any]:
        """The record saved with the message (``_recall``): never sent to a model."""
        data: dict[str, Any] = {
            "version": 1,
            "mode": self.mode,
            "bar": round(self.bar, 3),
            "hits": [
                {"citation": h.citation, "score": round(h.score, 4), "tokens": h.tokens}
                for h in self.hits
            ],
            "seconds": round(self.seconds, 3),
        }
        if self.left_out:
            data["left_out"] = [{"citation": c, "why": why} for c, why in self.left_out]
        if self.note:
            data["note"] = self.note
        return data


def _count(text: str) -> int:
    # Never load the tokenizer's tables for this: a one-shot run's first reply would wait.
    return tokens.count_text(text) if tokens.exact_loaded() else tokens.estimate_text(text)


def format_recalled(hit: Hit) -> str:
    """``- [citation, Thu 25 May 2023 13:56] role: text``: one line, fenced, each relative
    time in it followed by the date it named when it was said (:mod:`.relative_dates`)."""
    said = parse_ts(hit.timestamp)
    when = f"{said:%a} {said.day} {said:%B %Y %H:%M}" if said else hit.timestamp
    where = ", ".join(p for p in (hit.citation, when) if p)
    text = quote_untrusted(annotate_relative_dates(hit.snippet, said) if said else hit.snippet)
    return f"- [{where}] {hit.role}: {text}" if hit.role else f"- [{where}] {text}"


_RECALLED_PREFIX = lazy_compile(
    r"^\s*(?:[-*+]\s+)?\[(?P<cite>[^\],]+)(?:,[^\]]*)?\]\s*(?:(?:user|assistant|system|tool)\s*:\s*)?"
)


def recalled_text(line: str) -> str:
    """What a line written as :func:`format_recalled` writes it says, without its citation,
    date and speaker: a model that copies recalled memory into a file copies those too
    ("- [session cli:s#8, Tue 1 December 2026 10:16] user: I live in Tokyo."), and they
    are where and when it was said, not part of what was said. Other lines as they are."""
    m = _RECALLED_PREFIX.match(line)
    if m is None or parse_citation(m.group("cite")) is None:
        return line
    return line[m.end():]


_ROLE_PREFIX = lazy_compile(r"^(?:user|assistant|system|tool)\s*:\s*")


def _plain(text: str) -> str:
    text = text.replace("«", "").replace("»", "").casefold()
    text = " ".join(text.split()).strip(" \t'\"`[]().…")
    return _ROLE_PREFIX.sub("", text).strip(" '\"`.…")


def recalled_citation(argument: str, lines: list[str]) -> str | None:
    """The citation of the one recalled line (as :func:`format_recalled` wrote it) that
    ``argument`` quotes, or that quotes it: a small model passes what a line says as the
    citation to expand ("user: My cat is called Luna, she is a grey tabby.", "4417"). None
    when no line, or more than one, does."""
    said = _plain(argument)
    if len(said) < 3:
        return None
    found = set()
    for line in lines:
        m = _RECALLED_PREFIX.match(line)
        text = _plain(recalled_text(line))
        if m is not None and text and (said in text or text in said):
            found.add(m.group("cite").strip())
    return found.pop() if len(found) == 1 else None


def _superseded(hits: list[Hit]) -> dict[str, str]:
    """The hits that state a value another hit, said no earlier, corrects ("I live in Osaka
    now, not in Tokyo" supersedes "I live in Tokyo."), each with the correcting citation. A
    small model shown both answered with the old one; the correction itself stays."""
    out: dict[str, str] = {}
    for fix in hits:
        new, old = split_correction(fix.snippet, strict=True)
        if not old or fix.timestamp is None:
            continue
        for hit in hits:
            if (
                hit is not fix
                and hit.citation not in out
                and hit.timestamp is not None
                and (hit.timestamp <= fix.timestamp or _summarises(hit, fix))
                and mentions_old_value(hit.snippet, old, new)
            ):
                out[hit.citation] = fix.citation
    return out


def _summarises(hit: Hit, fix: Hit) -> bool:
    """Whether ``hit`` is a history entry of the conversation ``fix`` was said in: written
    after the correction, but from that conversation, old value included. A small model
    archived "I live in Tokyo." and "User lives in Osaka now, not in Tokyo" in one entry,
    and recalled beside the correction the old line was answered."""
    return hit.kind == "history" and fix.kind == "session" and hit.session_key == fix.session_key


def _said(hit: Hit) -> Hit | None:
    """``hit``, or None when it is an assistant message that only called tools: searched
    with ``statements``, its snippet is what it said, calls left out
    (:func:`~hippobot.recall.query.load_hits`). What the agent did is found by
    ``memory_search``; recalled beside a question, the local model took ``[tool call]
    edit_file({...})`` for something to do and ran the old edit again, or wrote the call out
    as its answer to "Which city do I live in?"."""
    return None if hit.role == "assistant" and not hit.snippet.strip() else hit


def _only_asks(text: str) -> bool:
    """Whether a message is nothing but questions (every sentence of it asks)."""
    sentences = [part.strip() for part in _SENTENCE_BREAK.split(text) if part.strip()]
    return bool(sentences) and all(map(_asks, sentences))


def _session_number(hit: Hit) -> int | None:
    number = hit.citation.rpartition("#")[2]
    return int(number) if hit.kind == "session" and number.isdigit() else None


def _history_cursor(hit: Hit) -> int | None:
    number = hit.citation.rpartition("#")[2]
    return int(number) if hit.kind == "history" and number.isdigit() else None


class AutoRecall:
    """Recall before answering for one workspace's sessions.

    ``index`` makes (or returns) the workspace's :class:`RecallIndex`; it is called in a
    worker thread, within the time budget, since opening one may load an embedding model.
    """

    def __init__(
        self,
        index: Callable[[], RecallIndex],
        *,
        max_tokens: int,
        min_score: float | None,
        timeout_s: float,
        include_other_sessions: bool,
    ) -> None:
        self._index = index
        self.max_tokens = max_tokens
        self.min_score = min_score
        self.timeout_s = timeout_s
        self.include_other_sessions = include_other_sessions
        self._warned: set[str] = set()

    @property
    def enabled(self) -> bool:
        return self.max_tokens > 0

    async def recall(
        self, query: str, *, session_key: str, shown: Callable[[], Shown], replayed_from: int | None = None
    ) -> Recollection:
        """The hits to add to the message ``query`` of session ``session_key``; never
        raises, never takes much longer than ``timeout_s``. ``shown`` tells what the
        request shows already (asked only when some hit clears the bar); ``replayed_from``
        is the session's first message the request replays (what the prompt holds need not
        be indexed before the search: :meth:`RecallIndex.search`)."""
        started = time.monotonic()
        deadline = started + self.timeout_s
        out = Recollection()
        if not self.enabled or not query.strip():
            return out
        query = out.query = search_text(query)
        try:
            # Opening the index and a keyword search share one trip to a worker thread.
            index, hits = await _within(
                asyncio.to_thread(self._open_and_search, query, session_key, replayed_from), deadline
            )
            out.mode, out.bar = "keyword", self._bar(None)
            if hits is None:  # the index has vectors: the query's first, within half the time
                vector = None
                half = started + self.timeout_s / 2
                try:
                    vector = await _within(asyncio.to_thread(index.embed_query, query), half)
                except TimeoutError:
                    out.note = f"the query vector was not ready within {self.timeout_s / 2:g} s: keywords only"
                out.mode = "hybrid" if vector is not None else "keyword"
                out.bar = self._bar(vector)
                hits = await _within(
                    asyncio.to_thread(self._search, index, query, session_key, vector, replayed_from), deadline
                )
        except TimeoutError:
            out.mode, out.note = "timeout", f"memory search took longer than {self.timeout_s:g} s"
            self._warn_once("timeout", f"recall before answering skipped: {out.note}")
        except Exception as exc:  # a broken index must never fail the turn
            out.mode, out.note = "failed", f"{type(exc).__name__}: {exc}"
            self._warn_once("failed", f"recall before answering skipped: memory search failed: {out.note}")
        else:
            parsed = parse_query(query)
            self._choose(hits, parsed, asks_about_the_user(parsed, query), shown, out)
        out.seconds = time.monotonic() - started
        return out

    def _bar(self, vector: Any) -> float:
        if self.min_score is not None:
            return self.min_score
        return VECTOR_BAR if vector is not None else KEYWORD_BAR

    def _search(
        self, index: RecallIndex, query: str, session_key: str, vector: Any, replayed_from: int | None
    ) -> list[Hit]:
        return index.search(
            query, k=_SEARCH_K, session_key=session_key,
            include_other_sessions=self.include_other_sessions, min_score=self._bar(vector),
            vector=vector, semantic=vector is not None,
            snippet_chars=_SNIPPET_CHARS, marks=False, max_terms=_MAX_TERMS, statements=True,
            replayed_from=replayed_from,
        )  # fmt: skip

    def _open_and_search(
        self, query: str, session_key: str, replayed_from: int | None
    ) -> tuple[RecallIndex, list[Hit] | None]:
        """The index, and the keyword hits when it has no vectors (None: it has some, and
        the query's vector comes first)."""
        index = self._index()
        if index.semantic:
            return index, None
        return index, self._search(index, query, session_key, None, replayed_from)

    def _choose(
        self,
        hits: list[Hit],
        query: ParsedQuery,
        about_the_user: bool,
        shown_now: Callable[[], Shown],
        out: Recollection,
    ) -> None:
        if not hits:
            return
        shown, used = shown_now(), 0
        said = []
        for hit in hits:
            if hit.role == "tool":
                # A command's output or a file the agent read: for "What is my cat called?"
                # the first line recalled was an earlier turn's `cat memory/MEMORY.md`,
                # a copy of what the system prompt holds, cut mid-heading, above the
                # user's own words. What tools returned is for memory_search to find.
                out.left_out.append((hit.citation, "a tool's output, not something said"))
            elif _said(hit) is None:
                out.left_out.append((hit.citation, "a tool call, not something said"))
            elif hit.role == "assistant" and about_the_user:
                # "What is my cat called?" is answered by what the user said. The local
                # model's replies ("To remember that Luna is a grey tabby cat, I've added
                # the following to MEMORY.md: ```json ...```") were recalled beside it and
                # copied as the answer, in two core runs four answers of twelve.
                out.left_out.append((hit.citation, "a reply, and the message asks about the user"))
            elif hit.role == "user" and about_the_user and _only_asks(hit.snippet):
                # "Where do I work?", asked in another conversation, was recalled for "What
                # is my locker code at work?" beside the remembered code; the local model
                # opened it and answered "I work at Initech as a nurse". A question states
                # nothing about the user.
                out.left_out.append((hit.citation, "a question, and the message asks about the user"))
            elif hit.role == "assistant" and not shares_a_word(hit.snippet, query):
                # A reply only the vectors found. What the local model said in the planted
                # conversations ("To correct the given facts, you need to update
                # memory/MEMORY.md ...") sat near every question in vector space, was
                # recalled for the name, the work and the cat, and was copied as the
                # answer to two of them. What the user said stays recalled by meaning.
                out.left_out.append((hit.citation, "a reply that shares no word with the message"))
            else:
                said.append(hit)
        superseded = _superseded(said)
        # Two entries often say the same ("User's name is Maya" in the summaries of two
        # conversations): the words once, under the better hit, and the room for another.
        seen: dict[str, str] = {}
        for hit in said:
            if hit.citation in superseded:
                out.left_out.append((hit.citation, f"superseded by {superseded[hit.citation]}"))
                continue
            words = " ".join(hit.snippet.casefold().split())
            if words in seen:
                out.left_out.append((hit.citation, f"the same words as {seen[words]}"))
                continue
            number = _session_number(hit)
            if number is not None and shown.replays(hit.session_key, number):
                out.left_out.append((hit.citation, "in this conversation"))
                continue
            cursor = _history_cursor(hit)
            if (cursor is not None and shown.shows_entry(cursor)) or (
                hit.kind != "session" and shown.in_prompt(hit.snippet)
            ):
                out.left_out.append((hit.citation, "in the system prompt"))
                continue
            if shown.recalled_before(hit.citation):
                out.left_out.append((hit.citation, "recalled for an earlier message replayed"))
                continue
            if len(out.hits) >= MAX_HITS:
                out.left_out.append((hit.citation, "over the hit limit"))
                continue
            line = format_recalled(hit)
            cost = _count(line) + 1
            if used + cost > self.max_tokens:
                out.left_out.append((hit.citation, "over the token budget"))
                continue
            used += cost
            seen[words] = hit.citation
            out.hits.append(Recalled(hit.citation, hit.score, line, cost, hit.role))
        # What the user said first, the replies after, and among each the lines that say
        # the question's very words first: which lines are recalled is decided by rank,
        # but a small model takes the first line it is shown. Asked where she works, the
        # local model answered with the recalled reply above her own words (a reply about
        # her locker code), copied whole; asked "What is my name?", it read "I have a cat
        # named Luna", ranked above "User's name is Maya" by the stem and the word twice.
        out.hits.sort(key=lambda r: (r.role == "assistant", -words_said(recalled_text(r.line), query)))

    def _warn_once(self, kind: str, message: str) -> None:
        if kind in self._warned:
            log.debug("%s", message)
            return
        self._warned.add(kind)
        log.warning("%s (said once; later turns go on the same way)", message)


async def _within(work: Any, deadline: float) -> Any:
    """``work``'s result if it is done by ``deadline`` (monotonic); else TimeoutError, and
    the work goes on by itself (a thread cannot be stopped) with its outcome ignored."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.wait_for(asyncio.shield(task), max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        task.add_done_callback(_ignore_outcome)
        raise


def _ignore_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise
