"""Answering recall queries: tokens, the ranking SQL, snippets, hits and citations.

Both sides of the index, the writer and the searcher, share the one definition of a token
here (:func:`index_text`, :func:`parse_query`); the functions at the end read the index
through a connection they are given and format what a person or the model sees.

Tokenising. The FTS5 table uses ``porter unicode61`` for words. Scripts written without
spaces between words (Chinese, Japanese, Thai, ...) would come out of ``unicode61`` as one
giant token per run of characters, so :func:`index_text` rewrites every such run into
overlapping character bigrams plus the run's last character (``深色模式`` becomes
``深色 色模 模式 式``). A query run is matched as the phrase of its bigrams, a single
character as a prefix. This finds two-character words, the most common word length in
Chinese, which a trigram tokenizer cannot do without a table scan.

Escaping. User text never reaches FTS5 syntax: :func:`parse_query` keeps only token
characters, every term is emitted as a double-quoted string, and operators (``AND``,
``NEAR``, ``*``, parentheses, column filters) are only ever written by this module.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sqlite3
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from hippobot.errors import UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.memory.facts import fact_text
from hippobot.safeio import read_text

__all__ = [
    "FTS_TABLES",
    "KIND_BOOST",
    "RECENCY_TAU_DAYS",
    "RECENCY_WEIGHT",
    "TOOL_CALL_MARK",
    "Citation",
    "Hit",
    "Kind",
    "ParsedQuery",
    "RecallError",
    "Scope",
    "Term",
    "best_lines",
    "best_snippet",
    "candidate_sql",
    "expand_citation",
    "format_file_lines",
    "format_history_entry",
    "format_session_window",
    "format_ts",
    "index_text",
    "load_hits",
    "match_expression",
    "name_words",
    "owner_clause",
    "owner_filter",
    "owner_token",
    "parse_citation",
    "parse_query",
    "score_sql",
    "terms_said",
    "words_said",
]

Kind = Literal["history", "session", "memory"]
Scope = Literal["all", "history", "sessions", "memory"]

# Recency boost: a match from today weighs up to (1 + RECENCY_WEIGHT) times an old one;
# the extra weight halves after RECENCY_TAU_DAYS (hyperbolic decay: cheap in plain SQL).
RECENCY_WEIGHT = 0.5
RECENCY_TAU_DAYS = 30.0
# Memory files are the current, curated truth; history summaries are distilled facts;
# raw transcript lines are the noisiest.
KIND_BOOST: dict[str, float] = {"memory": 1.25, "history": 1.1, "session": 1.0}

# Scripts whose words are not separated by spaces: Han, kana, Hangul, Thai, Lao, Khmer,
# Myanmar. Kept as one character class so a run of any mix of them is one unit.
_UNSEGMENTED = (
    "\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff"
    "\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3038-\u303b\u3040-\u30ff\u3130-\u318f"
    "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0003134f"
)


@functools.cache
def _unsegmented() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A run of those scripts, and one character of them. Compiled at first use: each wide
    class takes ~4 ms to compile, and a text that is all ASCII never needs them."""
    return re.compile(f"[{_UNSEGMENTED}]+"), re.compile(f"[{_UNSEGMENTED}]")


# English function words: dropped from a query that has other terms (they match nearly
# every row, which makes BM25 slow and adds nothing to the ranking).
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        """a about after again all also am an and any are as at be been before being both but
        by can could did do does doing during each few for from further had has have having
        he her here hers him his how i if in into is it its just me more most my no nor not
        now of off on once only or other our out over own same she should so some such than
        that the their them then there these they this those through to too under until up
        very was we were what when where which while who whom why will with would you your""",
    )
)

_MAX_TERMS = 16
_MAX_SPANS = 2000  # matches considered when placing a snippet in a very long text
_PREFIX_MIN = 3  # in the prefix pass, shorter words stay exact (a prefix "a*" is huge)


def _bigrams(run: str) -> str:
    if len(run) == 1:
        return run
    grams = [run[i : i + 2] for i in range(len(run) - 1)]
    grams.append(run[-1])
    return " ".join(grams)


def index_text(text: str) -> str:
    """The string handed to FTS5 for ``text``: NFKC-normalised, unsegmented runs as bigrams.

    Invariant: deterministic. Rows are deleted from the contentless FTS table by replaying
    this exact output, so a change here must bump the index schema version.
    """
    if text.isascii():
        return text  # NFKC leaves ASCII as it is, and no unsegmented script is in it
    text = unicodedata.normalize("NFKC", text)
    return _unsegmented()[0].sub(lambda m: f" {_bigrams(m.group(0))} ", text)


def owner_token(kind: str, session_key: str | None) -> str:
    """Token in the ``owner`` column naming which session a row belongs to.

    Digits only after the ``k`` so the porter stemmer leaves it alone.
    """
    if kind == "memory":
        return "kmemory"
    if not session_key:
        return "knone"
    digest = hashlib.sha1(session_key.encode("utf-8")).hexdigest()
    return f"k{int(digest[:15], 16)}"


@dataclass(frozen=True, slots=True)
class Term:
    """One query term: a word (matched stemmed) or a run of unsegmented script."""

    text: str
    cjk: bool

    def fts(self, *, prefix: bool) -> str:
        """The term as an FTS5 string; only token characters, so quoting is safe."""
        if self.cjk:
            if len(self.text) == 1:
                return f'"{self.text}"*'
            grams = [self.text[i : i + 2] for i in range(len(self.text) - 1)]
            return '"' + " ".join(grams) + '"'
        star = "*" if prefix and len(self.text) >= _PREFIX_MIN else ""
        return f'"{self.text}"{star}'


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    terms: tuple[Term, ...]
    only_stopwords: bool = False  # nothing but words like "the": rank by recency alone
    words: frozenset[str] = frozenset()  # every word of the query, stop words included

    def __bool__(self) -> bool:
        return bool(self.terms)

    def longest(self, count: int) -> ParsedQuery:
        """At most ``count`` terms, the longest (the rarer, as a rule), in their order: a
        long message searched in bounded work."""
        if len(self.terms) <= count:
            return self
        keep = sorted(range(len(self.terms)), key=lambda i: (-len(self.terms[i].text), i))[:count]
        return ParsedQuery(
            tuple(self.terms[i] for i in sorted(keep)), self.only_stopwords, self.words
        )


def _char_class(ch: str) -> int:
    """0 separator, 1 word character (unicode61: L*, N*, Co, M*), 2 unsegmented script."""
    if not ch.isascii() and _unsegmented()[1].match(ch):
        return 2
    cat = unicodedata.category(ch)
    return 1 if cat[0] in "LNM" or cat == "Co" else 0


def _tokens(text: str) -> Iterator[tuple[str, bool]]:
    """Runs of word characters and runs of unsegmented script, as ``(run, is_cjk)``."""
    run: list[str] = []
    current = 0
    for ch in text:
        cls = _char_class(ch)
        if cls != current and run:
            yield "".join(run), current == 2
            run = []
        current = cls
        if cls:
            run.append(ch)
    if run:
        yield "".join(run), current == 2


def parse_query(text: str) -> ParsedQuery:
    """Split free text into plain terms; FTS syntax characters simply disappear.

    Stop words are dropped unless nothing else is left, duplicates are removed, and at most
    ``_MAX_TERMS`` terms are kept so a pasted paragraph cannot build a huge query.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    terms: list[Term] = []
    seen: set[str] = set()
    for word, cjk in _tokens(text):
        if word not in seen:
            seen.add(word)
            terms.append(Term(word, cjk=cjk))
    content = [t for t in terms if t.cjk or t.text not in _STOPWORDS]
    return ParsedQuery(
        tuple((content or terms)[:_MAX_TERMS]),
        only_stopwords=bool(terms) and not content,
        words=frozenset(t.text for t in terms if not t.cjk),
    )


def name_words(name: str) -> tuple[str, ...]:
    """The words of a (case-folded) name, any of which in a query names that person: all
    but initials and short titles ("dr. ana lima" -> ana, lima)."""
    words = [w for w, cjk in _tokens(name) if not cjk]
    return tuple(w for w in words if len(w) > 2 and w not in _STOPWORDS) or tuple(words)


def match_expression(query: ParsedQuery, *, mode: Literal["all", "any"], prefix: bool) -> str:
    """FTS5 MATCH text for the terms on the ``body`` column (all of them, or any)."""
    joiner = " AND " if mode == "all" else " OR "
    return "body : (" + joiner.join(t.fts(prefix=prefix) for t in query.terms) + ")"


def owner_clause(owners: list[str] | None) -> str:
    """`` AND owner : (...)`` limiting a match to rows of these owners ('' for no limit)."""
    if not owners:
        return ""
    return " AND owner : (" + " OR ".join(f'"{o}"' for o in owners) + ")"


def score_sql(bm25: str, ts: str) -> str:
    """SQL expression for the ranking score (higher is better) of one candidate row.

    ``relevance × (1 + RECENCY_WEIGHT / (1 + age / RECENCY_TAU))`` where relevance is
    FTS5's ``-bm25()`` (it is negative; more negative = more relevant) plus a small floor,
    because bm25 is ~0 for terms found in most documents (tiny workspaces) and the
    recency boost must still order those. ``ts`` must be an SQL expression giving epoch
    seconds; the parameters ``:now`` is bound by the caller. The kind boost is applied
    afterwards, in Python.
    """
    tau = RECENCY_TAU_DAYS * 86400.0
    return (
        f"(max(0.0, -{bm25}) + 0.01) * "
        f"(1.0 + {RECENCY_WEIGHT} / (1.0 + max(0.0, :now - {ts}) / {tau}))"
    )


# --- snippets -------------------------------------------------------------------------


def _term_pattern(term: Term) -> str:
    if term.cjk:
        return re.escape(term.text)
    # Approximate the stemmer for highlighting: keep the first ~60 % of a long word so
    # "preferences" also lights up "preferred".
    keep = len(term.text) if len(term.text) <= 4 else max(4, int(len(term.text) * 0.6))
    return re.escape(term.text[:keep]) + r"[^\W_]*"


def _word_start(text: str, pos: int) -> bool:
    """True if a word match may start at ``pos``: after a separator or CJK (not mid-word)."""
    if pos == 0:
        return True
    before = text[pos - 1]
    return not before.isalnum() or (not before.isascii() and _unsegmented()[1].match(before) is not None)


def _densest_window(spans: list[tuple[int, int, int]], width: int) -> int:
    """Start of the first span whose ``width``-wide window holds the most distinct terms."""
    counts: dict[int, int] = {}
    best, best_start, j = -1, spans[0][0], 0
    for i, (s, _e, _t) in enumerate(spans):
        while j < len(spans) and spans[j][0] < s + width:
            counts[spans[j][2]] = counts.get(spans[j][2], 0) + 1
            j += 1
        if len(counts) > best:
            best, best_start = len(counts), s
        term = spans[i][2]
        counts[term] -= 1
        if not counts[term]:
            del counts[term]
    return best_start


def _match_spans(flat: str, query: ParsedQuery) -> list[tuple[int, int, int]]:
    """``(start, end, term index)`` of each match of the query's terms, in text order."""
    spans: list[tuple[int, int, int]] = []
    for i, term in enumerate(query.terms):
        for m in re.finditer(_term_pattern(term), flat, flags=re.IGNORECASE):
            if term.cjk or _word_start(flat, m.start()):
                spans.append((m.start(), m.end(), i))
    spans.sort()
    del spans[_MAX_SPANS:]
    return spans


def shares_a_word(text: str, query: ParsedQuery) -> bool:
    """Whether ``text`` holds one of the query's terms (as a word or its stem), as
    snippets mark them: a hit that only vectors found holds none."""
    return bool(query) and bool(_match_spans(unicodedata.normalize("NFKC", text).casefold(), query))


def words_said(text: str, query: ParsedQuery) -> int:
    """How many of the query's distinct terms ``text`` holds as the very word, not only
    by its stem: "User's name is Maya" says the "name" of "What is my name?", "I have a
    cat named Luna" only matches it."""
    return terms_said(text, query)[1]


def terms_said(text: str, query: ParsedQuery) -> tuple[int, int]:
    """How many of the query's distinct terms ``text`` matches, by stem or as the very
    word, and how many of those it holds as the very word (see :func:`words_said`)."""
    flat = unicodedata.normalize("NFKC", text)
    spans = _match_spans(flat, query)
    exact = {t for s, e, t in spans if flat[s:e].casefold() == query.terms[t].text}
    return len({t for _s, _e, t in spans}), len(exact)


def best_lines(text: str, query: ParsedQuery, *, width: int = 280) -> tuple[str, int] | None:
    """The lines of a many-line ``text`` that match the query, as statements.

    A history entry is a list of facts, one per line. Cut as a window of characters, the
    excerpt recalled for "What is my name?" began with the fact before the one asked about,
    and a small model answered with that one ("I work at Initech as a nurse", seen with
    Qwen2.5-Coder-1.5B). Here each line is kept or left whole: the lines that match most
    of the query's distinct terms (most of them as the very word, not by its stem), as many
    as fit in ``width``, shown in their order and without their lifecycle tags (``[correction]``, which the same model then passed to
    ``memory_get`` as a citation). ``None`` when the text is one line or no line matches:
    the caller cuts a window instead.
    """
    flat = unicodedata.normalize("NFKC", text)
    lines: list[tuple[int, str]] = []  # (offset, line)
    offset = 0
    for raw in flat.split("\n"):
        if raw.strip():
            lines.append((offset, raw))
        offset += len(raw) + 1
    if len(lines) < 2:
        return None
    spans = _match_spans(flat, query)
    # (-distinct terms, -distinct terms matched as the very word, line number, first match):
    # "What is my name?" matches "named" by its stem, but "User's name is Maya" says it.
    matched: list[tuple[int, int, int, int]] = []
    j = 0
    for number, (start, line) in enumerate(lines):
        end = start + len(line)
        while j < len(spans) and spans[j][0] < start:
            j += 1
        here = [span for span in spans[j:] if span[0] < end]
        if here:
            terms = {t for _s, _e, t in here}
            exact = {t for s, e, t in here if flat[s:e].lower() == query.terms[t].text.lower()}
            matched.append((-len(terms), -len(exact), number, here[0][0]))
    if not matched:
        return None
    chosen: list[tuple[int, int]] = []  # (line number, first match)
    used = 0
    matched.sort()
    best = matched[0][:2]
    for *key, number, first in matched:
        if tuple(key) != best:  # a line that says less of the question is another fact
            break
        statement = " ".join(fact_text(lines[number][1]).split())
        if chosen and used + len(statement) + 3 > width:
            continue
        chosen.append((number, first))
        used += len(statement) + 3
    chosen.sort()
    parts = [" ".join(fact_text(lines[n][1]).split()) for n, _ in chosen]
    excerpt = " … ".join(parts)
    if len(excerpt) > width:  # one line alone longer than the budget
        excerpt = excerpt[: width - 1].rstrip() + "…"
    return excerpt, chosen[0][1]


def best_snippet(
    text: str, query: ParsedQuery, *, width: int = 160, marks: bool = True
) -> tuple[str, int]:
    """A one-line excerpt of ``text`` around the densest cluster of matches, marked «…»
    (unless ``marks`` is false).

    Returns the excerpt and the character offset of the first match it shows (callers
    turn it into a line number); 0 when nothing matched.
    """
    flat = unicodedata.normalize("NFKC", text)
    spans = _match_spans(flat, query)
    start = anchor = 0
    if spans:
        anchor = _densest_window(spans, width)
        start = max(0, anchor - width // 4)
        # Don't cut a word in half at the left edge.
        while start > 0 and flat[start - 1].isalnum() and flat[start].isalnum():
            start -= 1
    end = min(len(flat), start + width)
    while end < len(flat) and end > start + width // 2 and flat[end - 1 : end + 1].isalnum():
        end -= 1
    out: list[str] = []
    pos = start
    for s, e, _ in spans:
        if s < pos or s >= end:
            continue
        out.append(flat[pos:s])
        out.append(f"«{flat[s : min(e, end)]}»" if marks else flat[s : min(e, end)])
        pos = min(e, end)
    out.append(flat[pos:end])
    excerpt = " ".join("".join(out).split())
    if start > 0:
        excerpt = "…" + excerpt
    if end < len(flat):
        excerpt += "…"
    return excerpt, anchor


# --- hits and citations ---------------------------------------------------------------


# How a stored assistant message's tool calls read in the index: ``[tool call] name(args…)``.
TOOL_CALL_MARK = "[tool call]"


def _without_calls(text: str) -> str:
    """What an indexed assistant message said, without its ``[tool call] …`` lines (empty
    when it only called tools). The snippet is cut from this: cut from the whole, a window
    around a match began inside a call's arguments (``…path": "…/MEMORY.md", "old_text":
    "User lives in Tokyo", …``), past the mark that says it is a call."""
    return "\n".join(line for line in text.splitlines() if not line.startswith(TOOL_CALL_MARK)).strip()


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result. ``citation`` can be passed to ``RecallIndex.get``."""

    citation: str
    kind: Kind
    snippet: str
    score: float
    timestamp: str | None = None
    session_key: str | None = None
    other_session: bool = False
    role: str | None = None
    source: str = ""  # workspace-relative file the hit came from
    explain: dict[str, float | int | None] | None = None  # score parts, when asked for


@dataclass(frozen=True, slots=True)
class Citation:
    """A parsed citation: ``history#42``, ``session cli:direct#118``, ``memory/MEMORY.md:12``."""

    kind: Kind
    number: int
    session_key: str | None = None
    path: str | None = None


_HISTORY_CITE = lazy_compile(r"history\s*#\s*(\d+)")
_SESSION_CITE = lazy_compile(r"session\s+(\S.*?)\s*#\s*(\d+)")
_FILE_CITE = lazy_compile(r"(\S.*?):(\d+)")
_LEADING_BRACKETS = lazy_compile(r"[`'\"]*\[([^\],\[]+)[\],]")


def parse_citation(text: str) -> Citation | None:
    """Parse a citation as printed by search; ``None`` if it is not one. A citation copied
    with search's match marks in it (``«session» cli:direct#4``) is the citation, and so is
    one copied with the date shown after it (``history#5, Wed 2 December 2026 22:20``), or
    with the rest of the result line it opens (``[history#3] [other session cli:s] …``)."""
    unmarked = text.replace("«", "").replace("»", "").strip()
    if m := _LEADING_BRACKETS.match(unmarked):
        # A whole search result passed on: its first brackets are the citation.
        head = _parse_bare_citation(m.group(1).strip())
        if head is not None:
            return head
    s = unmarked.strip("[]()`'\"").strip()
    if "," in s:
        # the part before the comma first: "MEMORY.md:3, Wed 2 December 2026 22:20" would
        # otherwise read as line 20 of a file named "MEMORY.md:3, Wed 2 December 2026 22"
        head = _parse_bare_citation(s.partition(",")[0].strip().strip("[]()`'\"").strip())
        if head is not None:
            return head
    return _parse_bare_citation(s)


def _parse_bare_citation(s: str) -> Citation | None:
    if m := _HISTORY_CITE.fullmatch(s):
        return Citation("history", int(m.group(1)))
    if m := _SESSION_CITE.fullmatch(s):
        return Citation("session", int(m.group(2)), session_key=m.group(1))
    if m := _FILE_CITE.fullmatch(s):
        return Citation("memory", int(m.group(2)), path=m.group(1).replace("\\", "/"))
    return None


# --- expanded citations ---------------------------------------------------------------

_NEIGHBOUR_CHARS = 2_000  # messages around the cited one are shortened to this


class RecallError(UserError):
    """A bad scope or citation, or a citation that no longer exists; one line to show."""


_TS_FORMAT = "%Y-%m-%d %H:%M"


def format_ts(ts: float | None) -> str | None:
    """``YYYY-MM-DD HH:MM`` in local time, the way timestamps are written in the files."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts).strftime(_TS_FORMAT)
    except (OverflowError, OSError, ValueError):
        return None


def parse_ts(text: str | None) -> datetime | None:
    """The local time a :func:`format_ts` string names (``None`` if it is not one)."""
    if not text:
        return None
    try:
        return datetime.strptime(text, _TS_FORMAT)
    except ValueError:
        return None


def format_history_entry(
    num: int, ts: float | None, session_key: str | None, origin: str | None, text: str
) -> str:
    facts = [f for f in (format_ts(ts), session_key and f"session {session_key}") if f]
    if origin:
        facts.append(f"summarises session {origin}")
    head = f"history#{num}" + (f" ({', '.join(facts)})" if facts else "")
    return f"{head}\n{text}"


def format_session_window(
    session_key: str, cited: int, total: int, rows: list[tuple[int, float | None, str, str]]
) -> str:
    """The message ``cited`` first, then ``rows`` = (index, ts, role, text) around it in
    order, role-labelled.

    The cited message leads: expanding "My cat is called Luna", the local model answered
    from the first message of the window, two turns earlier. Around it, what was said: a
    neighbour's tool calls and what tools returned are left out (counted), as the arguments
    of an edit_file call were the first line the model read for the garden."""
    first, last = rows[0][0], rows[-1][0]
    head, around, steps = [], [], 0
    for num, ts, role, text in rows:
        label = ", ".join(x for x in (f"#{num} {role}", format_ts(ts)) if x)
        if num == cited:
            head = [f"session {session_key}, message {label} (cited)", text]
            around.append(f"--- #{num} {role} (the cited message, above)")
            continue
        text = "" if role == "tool" else _without_calls(text) if role == "assistant" else text
        if not text:
            steps += 1
            continue
        if len(text) > _NEIGHBOUR_CHARS:
            text = text[:_NEIGHBOUR_CHARS] + f"… [{len(text) - _NEIGHBOUR_CHARS} more chars]"
        around.append(f"--- {label}\n{text}")
    if len(around) == 1:
        return "\n".join(head)
    left_out = f", {steps} tool step{'s' if steps != 1 else ''} left out" if steps else ""
    return "\n".join([*head, "", f"Around it (messages {first}-{last} of {total}{left_out}):", *around])


def format_file_lines(path: str, lines: list[str], first: int, last: int, cited: int) -> str:
    """Lines ``first..last`` (1-based) of a file, numbered, the cited one marked ``>``."""
    width = len(str(last))
    out = [f"{path} lines {first}-{last} of {len(lines)}"]
    for n in range(first, last + 1):
        mark = ">" if n == cited else " "
        out.append(f"{mark}{n:>{width}}  {lines[n - 1]}")
    return "\n".join(out)


# --- reading the index ---------------------------------------------------------------

FTS_TABLES = {"memory": "fts_memory", "history": "fts_history", "session": "fts_session"}


def candidate_sql(kind: str, *, ranked: bool) -> str:
    """Score the newest ``:cap`` matches of one kind (bm25 × recency), keep the best ``:k``.

    Bounded work even for a term found in every document. Unranked (a query of stop words
    only) skips bm25, whose cost grows with the number of matches, and orders by recency.
    """
    table = FTS_TABLES[kind]
    bm25 = f"bm25({table}, 1.0, 0.0)" if ranked else "-1.0"
    return f"""
SELECT c.id, {score_sql("c.bm25", "coalesce(d.ts, :missing_ts)")} AS score FROM (
    SELECT rowid AS id, {bm25} AS bm25 FROM {table}
    WHERE {table} MATCH :match ORDER BY rowid DESC LIMIT :cap
) AS c JOIN docs AS d ON d.id = c.id
ORDER BY score DESC, c.id DESC LIMIT :k
"""


def owner_filter(kind: str, session_key: str | None, include_other: bool) -> list[str] | None:
    """Owner tokens a private session may see for ``kind``; ``None`` means no filter."""
    if include_other or not session_key or kind == "memory":
        return None
    own = owner_token(kind, session_key)
    return [own] if kind == "session" else [own, owner_token(kind, None)]


def load_hits(
    conn: sqlite3.Connection,
    best: list[tuple[int, float]],
    parsed: ParsedQuery,
    session_key: str | None,
    explain: dict[int, dict[str, float | int | None]] | None = None,
    *,
    snippet_chars: int = 160,
    marks: bool = True,
    statements: bool = False,
) -> list[Hit]:
    """Hits for ``(doc id, score)`` pairs, in that order, with snippet and citation
    (and, when ``explain`` is given, each hit's score parts from it). ``statements``: a
    history entry of many lines is shown as its matching lines (:func:`best_lines`), an
    assistant message as what it said (:func:`_without_calls`; an empty snippet when it
    only called tools)."""
    if not best:
        return []
    ids = [doc_id for doc_id, _ in best]
    params = ",".join("?" * len(ids))
    rows = {
        r[0]: r
        for r in conn.execute(
            "SELECT d.id, d.num, d.ts, d.session_key, d.role, t.text, f.rel, f.kind "
            "FROM docs d JOIN files f ON f.id = d.file_id JOIN texts t ON t.id = d.id "
            f"WHERE d.id IN ({params})",
            ids,
        )
    }
    hits = []
    for doc_id, score in best:
        if doc_id not in rows:
            continue
        _, num, ts, key, role, text, rel, kind = rows[doc_id]
        if statements and role == "assistant":
            text = _without_calls(text)
        # A history entry is a list of facts; a message's lines belong together.
        by_line = best_lines(text, parsed, width=snippet_chars) if statements and kind == "history" else None
        snippet, offset = by_line or best_snippet(text, parsed, width=snippet_chars, marks=marks)
        if kind == "history":
            citation = f"history#{num}"
        elif kind == "session":
            citation = f"session {key}#{num}"
        else:
            citation = f"{rel}:{num + text.count(chr(10), 0, offset)}"
        other = bool(session_key and key and kind != "memory" and key != session_key)
        hits.append(
            Hit(
                citation=citation,
                kind=kind,
                snippet=snippet,
                score=round(score, 6),
                timestamp=format_ts(ts),
                session_key=key,
                other_session=other,
                role=role,
                source=rel,
                explain=explain.get(doc_id) if explain is not None else None,
            )
        )
    return hits


def expand_citation(
    conn: sqlite3.Connection, workspace: Path, cite: Citation, around: int, private: str | None
) -> str:
    """The text ``RecallIndex.get`` returns; ``private`` is the only session visible, if set."""
    if cite.kind == "history":
        return _get_history(conn, cite.number, private)
    if cite.kind == "session":
        key = cite.session_key or ""
        if private and key != private:
            raise RecallError(f"session {key} is not visible from this chat")
        return _get_session(conn, key, cite.number, around)
    return _get_lines(conn, workspace, cite.path or "", cite.number, around)


def _get_history(conn: sqlite3.Connection, number: int, private: str | None) -> str:
    row = conn.execute(
        "SELECT d.num, d.ts, d.session_key, d.origin, t.text FROM docs d "
        "JOIN files f ON f.id = d.file_id JOIN texts t ON t.id = d.id "
        "WHERE f.kind = 'history' AND d.num = ? "
        "ORDER BY d.id DESC LIMIT 1",
        (number,),
    ).fetchone()
    if row is None:
        raise RecallError(f"no history entry #{number}")
    if private and row[2] and row[2] != private:
        raise RecallError(f"history#{number} belongs to another session")
    return format_history_entry(*row)


def _get_session(conn: sqlite3.Connection, key: str, number: int, around: int) -> str:
    files = conn.execute(
        "SELECT id, next_num FROM files WHERE kind = 'session' AND session_key = ? ORDER BY id",
        (key,),
    ).fetchall()
    if not files:
        raise RecallError(f"no session {key!r} in the index")
    for file_id, total in files:
        rows = conn.execute(
            "SELECT d.num, d.ts, d.role, t.text FROM docs d JOIN texts t ON t.id = d.id "
            "WHERE d.file_id = ? AND d.num BETWEEN ? AND ? ORDER BY d.num",
            (file_id, number - around, number + around),
        ).fetchall()
        if any(r[0] == number for r in rows):
            return format_session_window(key, number, total, rows)
    raise RecallError(f"session {key} has no message #{number} with text")


def _get_lines(conn: sqlite3.Connection, workspace: Path, rel: str, line: int, around: int) -> str:
    # Only files the index covers can be opened: a citation is not a path to anywhere.
    known = conn.execute("SELECT 1 FROM files WHERE kind = 'memory' AND rel = ?", (rel,)).fetchone()
    if known is None:
        raise RecallError(f"{rel} is not an indexed memory file")
    try:
        lines = read_text(workspace / rel, within=workspace).splitlines()  # never via a link out
    except OSError as exc:
        raise RecallError(f"cannot read {rel}: {exc.strerror}") from exc
    if not 1 <= line <= len(lines):
        raise RecallError(f"{rel} has {len(lines)} lines; there is no line {line}")
    first, last = max(1, line - around), min(len(lines), line + around)
    return format_file_lines(rel, lines, first, last, line)
