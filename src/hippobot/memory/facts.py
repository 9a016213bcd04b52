"""Fact lines of history entries: their kinds, and what a correction replaces.

A consolidated history entry is a list of lines ``- [kind] text`` where kind is
``permanent``, ``durable``, ``ephemeral`` or ``correction``. The first two plus corrections
are *durable*: they must stay visible to the model until Dream has put them in SOUL.md,
USER.md or MEMORY.md (or rejected them with a reason).

A correction names what it replaces in one of two ways:

- ``X, not Y`` (or "no longer", "instead of", ...): the old value Y, the older form;
- ``X (replaces: <the earlier fact>)``, optionally ``(replaces #12: ...)`` with the cursor of
  the entry that stated it: what consolidation writes from the structured ``save_summary``
  output, so Dream knows *which* fact is replaced instead of guessing from shared words.

Whether a text states a fact is decided by the one fact matcher, :mod:`hippobot.factmatch`
(re-exported here for the callers that read fact lines and match them together).

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hippobot.factmatch import (
    content_words,
    find_statement,
    keywords,
    mentions_old_value,
    states,
    stem,
    words,
)
from hippobot.lazy_regex import lazy_compile

__all__ = [
    "DURABLE_KINDS",
    "FactLine",
    "Replaces",
    "fact_lines",
    "fact_text",
    "find_statement",
    "keywords",
    "mentions_old_value",
    "parse_fact_line",
    "replaced_value",
    "replaces_ref",
    "says_nothing",
    "split_correction",
    "states",
]

DURABLE_KINDS = frozenset({"permanent", "durable", "correction"})

_LINE = lazy_compile(
    r"^\s*(?:[-*•]\s*)?\[(permanent|durable|ephemeral|correction)\]\s*[:\-–]?\s*(.+?)\s*$", re.I
)
_NOT_TAIL = lazy_compile(
    r"(?:,|;|\(|—|–|-)?\s*\b(?:not|no longer|instead of|rather than|formerly|previously|"
    r"replacing|replaces)\b\s*(.+?)\)?\s*\.?\s*$",
    re.I,
)
# "switched from PostgreSQL to SQLite", "moved to Osaka from Tokyo"
_CHANGE = r"\b(?:switched|moved|changed|migrated|converted|upgraded|went|changing|switching|moving)"
_FROM_TO = lazy_compile(_CHANGE + r"(?P<cut>\s+from\s+(?P<old>[^,.;]+?))\s+(?=to\b)", re.I)
_TO_FROM = lazy_compile(_CHANGE + r"\s+to\s+[^,.;]+?(?P<cut>\s+from\s+(?P<old>[^,.;]+))", re.I)
# "(replaces: User lives in Tokyo)", "(replaces #12: ...)", "(replaces #12)" at the end
_REF = lazy_compile(r"\s*\((?:replaces|corrects)(?:\s+#(\d+))?\s*(?::\s*(.*?))?\s*\)\s*\.?\s*$", re.I)


# "The user's name was not mentioned", "No location was provided in the conversation",
# "User has not specified their age yet": a small model's summary states what it did *not*
# hear as a fact (seen with Qwen2.5-Coder-1.5B: five such "[correction]" lines in one
# entry). They say nothing about the user, and as durable lines a Dream batch has to place
# them in a memory file or stay held. Only a line that *ends* on the absence counts, so
# "User did not tell his boss about the move" stays a fact.
_UNSAID = (
    r"(?:mention(?:ed)?|provided?|specified|stated|given|shared|disclosed|discussed|said|say|"
    r"revealed|told|indicated|known|available|clear|confirmed)"
)
_ABSENCE = lazy_compile(
    r"(?:\b(?:not|never|n't)\s+(?:been\s+|yet\s+|explicitly\s+|directly\s+|specifically\s+|clearly\s+)*"
    + _UNSAID
    + r"(?:\s+(?:their|his|her|its|the|a|an|any)(?:\s+[\w'-]+){1,2})?"
    + r"|\b(?:unknown|unspecified|not applicable|n/a))"
    r"(?:\s+(?:in|during|by|from)\s+(?:the|this)\s+(?:conversation|transcript|chat|user|messages?|dialogue))?"
    r"(?:\s+(?:yet|so far|explicitly))?\W*$",
    re.I,
)
_NO_VALUE = lazy_compile(r"^(?:no|none of)\b.*\b(?:was|were|is|are|has been|have been)\s+" + _UNSAID + r"\b", re.I)


def says_nothing(text: str) -> bool:
    """Whether a summary line only says something was not said ("X was not mentioned")."""
    body = replaces_ref(text)[0].strip()
    return bool(_ABSENCE.search(body) or _NO_VALUE.search(body))


@dataclass(frozen=True, slots=True)
class Replaces:
    """The earlier fact a correction names: its text, and the cursor of its entry if given."""

    text: str | None
    cursor: int | None = None


def replaces_ref(text: str) -> tuple[str, Replaces | None]:
    """``(text without the reference, the reference)``; ``(text, None)`` without one."""
    m = _REF.search(text)
    if m is None or m.start() == 0 or not (m.group(1) or (m.group(2) or "").strip()):
        return text, None
    cursor = int(m.group(1)) if m.group(1) else None
    return text[: m.start()].rstrip(" ,;"), Replaces((m.group(2) or "").strip() or None, cursor)


@dataclass(frozen=True, slots=True)
class FactLine:
    kind: str  # permanent | durable | ephemeral | correction
    text: str

    @property
    def durable(self) -> bool:
        """A line to keep until Dream places it: not one that only says what went unsaid."""
        return self.kind in DURABLE_KINDS and not says_nothing(self.text)

    def render(self) -> str:
        return f"- [{self.kind}] {self.text}"


def parse_fact_line(raw: str) -> FactLine | None:
    """``- [kind] fact`` (bullet optional, any case of the tag) as a :class:`FactLine`;
    ``None`` for any other line. The one reader of the tagged-line format."""
    m = _LINE.match(raw)
    return FactLine(m.group(1).lower(), m.group(2)) if m is not None else None


def fact_lines(content: str) -> list[FactLine]:
    """The tagged lines of one entry's content (untagged lines and ``[RAW]`` dumps: none)."""
    return [line for raw in content.splitlines() if (line := parse_fact_line(raw)) is not None]


def fact_text(line: str) -> str:
    """A tagged line's fact without its bullet and tag (``- [durable] X`` -> ``X``); any
    other line unchanged. For readers that want the statement, not the lifecycle mark."""
    fact = parse_fact_line(line)
    return fact.text if fact is not None else line


_ENDS_WITH_VERB = lazy_compile(
    r"\b(?:is|are|was|were|be|been|am|do|does|did|has|have|had|will|would|can|could|should|"
    r"may|might|must|shall)\s*$",
    re.I,
)


def split_correction(text: str, *, strict: bool = False) -> tuple[str, str | None]:
    """``("moved to Osaka", "Tokyo")`` for "moved to Osaka, not Tokyo" (or "moved from Tokyo
    to Osaka"); ``(text, None)`` when no replaced value is named.

    With a reference, ``"lives in Osaka (replaces: User lives in Tokyo)"``, the claim is the
    text before it and the old value is what the replaced fact says that the claim does not
    ("Tokyo"): its names and numbers, else its other words.

    ``strict`` (for lines not tagged ``[correction]``): a "not" counts only after a comma,
    dash or parenthesis ("likes tea, not coffee"), so "does not eat meat" stays whole.
    """
    body, ref = replaces_ref(text)
    m = _NOT_TAIL.search(body)
    if m is not None and strict and not re.match(r"\s*[,;(—–-]", body[m.start() :]):
        m = None
    if m is not None and _open_quote(body[: m.start()]):
        m = None  # the "not" is inside a quotation: 'Old text "... not ..." was not found'

    if m is not None and _ENDS_WITH_VERB.search(body[: m.start()]):
        # "The weather was not awful, it was sunny": the "not" denies the verb, it does not
        # name a replaced value ("The weather was" had been placed as the new fact).
        m = None
    if m is not None and m.start() > 0:
        claim = body[: m.start()].strip(" ,;(—–-")
        return claim, _replaces_something(claim, m.group(1).strip(" .,;)"))
    m = _FROM_TO.search(body) or _TO_FROM.search(body)
    if m is not None and m.group("old").strip():
        claim = (body[: m.start("cut")] + body[m.end("cut") :]).strip(" ,;")
        return claim, _replaces_something(claim, m.group("old").strip(" .,;"))
    if ref is None or not ref.text:
        return body, None
    return body, replaced_value(ref.text, body)


def _open_quote(text: str) -> bool:
    return text.count('"') % 2 == 1 or text.count("“") > text.count("”")


def _replaces_something(claim: str, old: str) -> str | None:
    """``old``, unless the claim itself says all of it ('mentioned "basil" instead of
    "basil"'): a line that replaces nothing must not make every line with that word stale."""
    said = {stem(w) for w in content_words(claim)}
    gone = {stem(w) for w in content_words(old)}
    return None if not old or (gone and gone <= said) else old


def replaced_value(old: str, new: str) -> str | None:
    """What ``new`` replaces of the fact ``old``: the names and numbers of ``old`` that
    ``new`` does not say, else its other words ("Tokyo" for "lives in Tokyo" → "lives in
    Osaka"); ``None`` when ``new`` says all of it."""
    old_salient, old_other = keywords("x " + old)
    new_salient, new_other = keywords("x " + new)
    have = {w.lower() for w in new_salient | new_other}
    for group in (old_salient, old_other):
        gone = [w for w in group if w not in have]
        if gone:
            return " ".join(dict.fromkeys(w for w in words(old) if w.lower() in gone))
    return None
