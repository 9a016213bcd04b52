"""Fact lines of history entries, and a forgiving way to tell whether a text states a fact.

A consolidated history entry is a list of lines ``- [kind] text`` where kind is
``permanent``, ``durable``, ``ephemeral`` or ``correction``. The first three of those plus
corrections are *durable*: they must stay visible to the model until Dream has put them in
SOUL.md, USER.md or MEMORY.md (or rejected them with a reason).

Matching is by keywords, not by exact text, because Dream rewrites facts in its own words
("User has a cat named Luna" becomes "- Has a cat named Luna"): a text states a fact when it
holds every *salient* word of the fact (names, numbers: capitalised or with digits, the
sentence's first word excepted) and most of its other content words. A correction
``X, not Y`` is stated by a text that says X; its old value Y is reported separately so
callers can check that nothing still states Y as current.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "DURABLE_KINDS",
    "FactLine",
    "fact_lines",
    "find_statement",
    "keywords",
    "mentions_old_value",
    "split_correction",
    "states",
]

DURABLE_KINDS = frozenset({"permanent", "durable", "correction"})

_LINE = re.compile(
    r"^\s*(?:[-*•]\s*)?\[(permanent|durable|ephemeral|correction)\]\s*[:\-–]?\s*(.+?)\s*$", re.I
)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_NOT_TAIL = re.compile(
    r"(?:,|;|\(|—|–|-)?\s*\b(?:not|no longer|instead of|rather than|formerly|previously|"
    r"replacing|replaces)\b\s*(.+?)\)?\s*\.?\s*$",
    re.I,
)
_NEGATED_BEFORE = re.compile(
    r"\b(?:not|no longer|formerly|previously|used to|moved from|instead of|rather than)\b"
    r"[^.;]{0,30}$",
    re.I,
)
_STOP = frozenset(
    ["a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as", "is", "are", "was", "were", "be", "been", "being", "has", "have", "had", "do", "does", "did", "it", "its", "this", "that", "these", "those", "there", "their", "they", "them", "he", "she", "his", "her", "him", "you", "your", "yours", "we", "our", "us", "i", "me", "my", "mine", "user", "user's", "users", "who", "whom", "which", "what", "when", "where", "why", "how", "named", "called", "name", "very", "really", "also", "just", "than", "then", "so", "such", "not", "no", "yes", "can", "will", "would", "should", "could", "may", "might", "must", "about", "into", "over", "under", "up", "down", "out", "now", "currently"]
)


@dataclass(frozen=True, slots=True)
class FactLine:
    kind: str  # permanent | durable | ephemeral | correction
    text: str

    @property
    def durable(self) -> bool:
        return self.kind in DURABLE_KINDS

    def render(self) -> str:
        return f"- [{self.kind}] {self.text}"


def fact_lines(content: str) -> list[FactLine]:
    """The tagged lines of one entry's content (untagged lines and ``[RAW]`` dumps: none)."""
    out: list[FactLine] = []
    for raw in content.splitlines():
        m = _LINE.match(raw)
        if m is not None:
            out.append(FactLine(m.group(1).lower(), m.group(2)))
    return out


def split_correction(text: str) -> tuple[str, str | None]:
    """``("moved to Osaka", "Tokyo")`` for "moved to Osaka, not Tokyo"; ``(text, None)``
    when no replaced value is named."""
    m = _NOT_TAIL.search(text)
    if m is None or m.start() == 0:
        return text, None
    old = m.group(1).strip(" .,;)")
    return text[: m.start()].strip(" ,;(—–-"), old or None


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


@lru_cache(maxsize=4096)
def keywords(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(salient, other) lower-cased content words of ``text``.

    Salient: words with a digit, or capitalised anywhere but at the start of the text
    (names, places, products). Other: the remaining words of three letters or more that
    are not stop words.
    """
    salient: set[str] = set()
    other: set[str] = set()
    for n, word in enumerate(_words(text)):
        low = word.lower()
        if low in _STOP:
            continue
        if any(c.isdigit() for c in word) or (n > 0 and word[:1].isupper()):
            salient.add(low)
        elif len(low) >= 3:
            other.add(low)
    return frozenset(salient), frozenset(other - salient)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@lru_cache(maxsize=8192)
def _line_words(text: str) -> frozenset[str]:
    return frozenset(_stem(w.lower()) for w in _words(text))


def states(text: str, fact: str, *, loose: bool = False) -> bool:
    """Whether ``text`` (one line of a file) states ``fact`` (a fact line's text).

    ``loose``: the salient words alone decide when there are any (a correction's new value
    is "Osaka" however the sentence around it is phrased).
    """
    salient, other = keywords(fact)
    if not salient and not other:
        return False
    have = _line_words(text)
    if any(_stem(w) not in have for w in salient):
        return False
    if not other or (loose and salient):
        return True
    hits = sum(_stem(w) in have for w in other)
    # With names to anchor on, half the other words suffice; without, two thirds.
    need = 0.5 if salient else 0.67
    return hits >= max(1, math.ceil(need * len(other) - 1e-9))


def mentions_old_value(text: str, old: str, new: str) -> bool:
    """Whether ``text`` still states ``old`` as current (mentions it, not as the replaced
    value and not next to the new one)."""
    salient, other = keywords("x " + old)  # "x " so a leading name counts as salient
    words = salient or other
    if not words:
        return False
    have = _line_words(text)
    if not all(_stem(w) in have for w in words):
        return False
    if states(text, new, loose=True):
        return False  # "Lives in Osaka (moved from Tokyo)"
    first = min(
        (m.start() for w in words for m in re.finditer(re.escape(w), text, re.I)), default=0
    )
    return _NEGATED_BEFORE.search(text[:first]) is None


def find_statement(
    fact: str, files: Iterable[tuple[str, str]], *, loose: bool = False
) -> str | None:
    """``"FILE:LINE"`` of the first line in ``files`` (name, text) that states ``fact``."""
    for name, text in files:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip() and states(line, fact, loose=loose):
                return f"{name}:{n}"
    return None
