"""The one way hippobot compares facts: tokeniser, stop words, normalisation, similarity.

Every place that asks "does this line say that fact?" or "is this the same line again?"
uses this module: Dream's accounting and its placement of findings
(:mod:`hippobot.lifecycle.accounting`, :mod:`hippobot.lifecycle.dream_apply`), the fact
lines of history entries (:mod:`hippobot.memory.facts`), the ledger of reverted lines
(:mod:`hippobot.memory.ledger`) and the relevance ranking of memory items
(:mod:`hippobot.context.memory_select`). It is a base module (it imports nothing of
hippobot), so every layer can use it.

The pipeline, in one place:

1. **Tokens** — :func:`words`: runs of letters and digits (any script; an inner apostrophe
   kept: "don't"), after NFKC normalisation (full-width letters, ligatures).
2. **Normal form of a word** — :func:`fold`: lower case, a possessive ``'s`` dropped, a
   plural ``s`` folded ("cats" → "cat", not "glass"). :func:`stem` folds further ("-ing",
   "-ed", "-es") for statement checks, where "moved" must meet "moves".
3. **Stop words** — :data:`STOP_WORDS`: English function words, one list for everyone.
   :data:`FILLER` adds the words a rewording of a fact drops without changing it ("user",
   "named", "called": "User has a cat named Luna" is "- Cat: Luna"); only the statement
   checks ignore those.
4. **Keywords** — :func:`keywords`: (salient, other). Salient words carry a name or a
   number: a digit, or a capital anywhere but the start of the text.
5. **Judgements** — :func:`states` (a line states a fact: every salient word and most
   others), :func:`mentions_old_value` (a line still says a corrected value as current),
   :func:`covers` (a text carries most words of a line), :func:`grounded` (a line a model
   wrote invents no name, number or most of its words), :func:`same_line` (a close
   rewording), :func:`heading_matches` (a heading a model named, found in a file).

Pure functions, no I/O, memoised where they are hot.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

from hippobot.lazy_regex import lazy_compile

__all__ = [
    "FILLER",
    "STOP_WORDS",
    "Said",
    "content_words",
    "covers",
    "find_statement",
    "fold",
    "grounded",
    "heading_matches",
    "keywords",
    "line_similarity",
    "mentions_old_value",
    "normalize_line",
    "same_line",
    "split_sentences",
    "states",
    "stem",
    "unsaid_names",
    "words",
]

_WORD = lazy_compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_POSSESSIVE = lazy_compile(r"['’]s$")

# English function words. One list: fact matching, memory relevance and (after the recall
# rewrite) search queries drop the same words.
STOP_WORDS = frozenset(
    ["a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "it", "its", "just", "me", "mine", "more", "most", "my", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "yes", "you", "your", "yours", "may", "might", "must", "shall", "really"]
)

# Words a rewording of a fact drops without changing it: Dream writes "User has a cat named
# Luna" as "- Cat: Luna". Ignored by the statement checks only (a search for "name" or
# "called" still means something).
FILLER = frozenset(
    ["user", "users", "named", "called", "name", "currently", "said", "says", "please", "remember"]
)

_NOT_FACT = STOP_WORDS | FILLER
_NEGATED_BEFORE = lazy_compile(
    r"\b(?:not|no longer|formerly|previously|used to|moved from|instead of|rather than)\b"
    r"[^.;]{0,30}$",
    re.I,
)
_LIST_MARK = lazy_compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
# A sentence ends at ".", "!" or "?" before a capital, not after a title or an initial
# ("Dr. Smith", "J. Doe" stay whole: a field filled with "Dr" would lose the name).
_SENTENCE_END = lazy_compile(r"(?<=[.!?])(?<![A-Z][a-z]\.)(?<!Mrs\.)(?<!\b[A-Z]\.)\s+(?=[\"'“(]?[A-Z0-9])")
_SIMILAR = 0.85  # a rewording this close to a line counts as the same line


def words(text: str) -> list[str]:
    """The words of ``text`` as written (NFKC-normalised), in order."""
    return _WORD.findall(unicodedata.normalize("NFKC", text))


def fold(word: str) -> str:
    """A word's normal form: lower case, no possessive ``'s``, a plural ``s`` folded."""
    low = _POSSESSIVE.sub("", word.lower())
    if len(low) > 3 and low.endswith("s") and not low.endswith("ss"):
        low = low[:-1]
    return low


@lru_cache(maxsize=16384)
def stem(word: str) -> str:
    """:func:`fold`, then "-ing", "-ed" or "-s" off and final "e"s (statement checks:
    "moved" ~ "moves" ~ "move", "lives" ~ "live", "tomatoes" ~ "tomato"; "-es" off whole
    had made "lives" "liv" but left "live" alone, so "User lives in Osaka" did not state
    "I live in Osaka")."""
    low = _POSSESSIVE.sub("", word.lower())
    for suffix in ("ing", "ed", "s"):
        if len(low) > len(suffix) + 2 and low.endswith(suffix) and not low.endswith("ss"):
            low = low[: -len(suffix)]
            break
    while len(low) > 3 and low.endswith("e"):  # "agree" ~ "agreed"
        low = low[:-1]
    return low


def _is_stop(word: str, *, filler: bool) -> bool:
    low = _POSSESSIVE.sub("", word.lower())
    return low in (_NOT_FACT if filler else STOP_WORDS)


def content_words(text: str, *, min_len: int = 3) -> list[str]:
    """Folded words of ``text`` without stop words; shorter ASCII words dropped (words of
    unsegmented scripts such as CJK are kept whatever their length)."""
    out = []
    for word in words(text):
        if _is_stop(word, filler=False):
            continue
        low = fold(word)
        if len(low) < min_len and low.isascii():
            continue
        out.append(low)
    return out


@lru_cache(maxsize=4096)
def keywords(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(salient, other) lower-cased content words of ``text``, stop words and filler out.

    Salient: words with a digit, or capitalised anywhere but at the start of the text
    (names, places, products). Other: the remaining words of three letters or more.
    """
    salient: set[str] = set()
    other: set[str] = set()
    for n, word in enumerate(words(text)):
        if _is_stop(word, filler=True):
            continue
        low = _POSSESSIVE.sub("", word.lower())
        if any(c.isdigit() for c in word) or (n > 0 and word[:1].isupper()):
            salient.add(low)
        elif len(low) >= 3:
            other.add(low)
    return frozenset(salient), frozenset(other - salient)


@lru_cache(maxsize=8192)
def _line_stems(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words(text))


def states(text: str, fact: str, *, loose: bool = False) -> bool:
    """Whether ``text`` (one line of a file) states ``fact`` (a fact line's text).

    Every salient word of the fact must be there; with names to anchor on, half the other
    words suffice, without, two thirds. ``loose``: the salient words alone decide when there
    are any (a correction's new value is "Osaka" however the sentence around it is phrased).
    """
    salient, other = keywords(fact)
    if not salient and not other:
        return False
    have = _line_stems(text)
    if any(stem(w) not in have for w in salient):
        return False
    if not other or (loose and salient):
        return True
    hits = sum(stem(w) in have for w in other)
    need = 0.5 if salient else 0.67
    return hits >= max(1, math.ceil(need * len(other) - 1e-9))


def mentions_old_value(text: str, old: str, new: str) -> bool:
    """Whether ``text`` still states ``old`` as current (mentions it, not as the replaced
    value and not next to the new one: "Lives in Osaka (moved from Tokyo)" does not)."""
    salient, other = keywords("x " + old)  # "x " so a leading name counts as salient
    wanted = salient or other
    if not wanted:
        return False
    have = _line_stems(text)
    if not all(stem(w) in have for w in wanted):
        return False
    if states(text, new, loose=True):
        return False
    first = min(
        (m.start() for w in wanted for m in re.finditer(re.escape(w), text, re.I)), default=0
    )
    return _NEGATED_BEFORE.search(text[:first]) is None


def find_statement(
    fact: str, files: Iterable[tuple[str, str]], *, loose: bool = False
) -> str | None:
    """``"FILE:LINE"`` of the first line in ``files`` (name, text) that states ``fact``; for
    a fact of several sentences that no one line states, the line of its first sentence
    when every sentence that says something is stated by some line ("Hi! I'm Maya. Please
    remember that I work at Initech as a nurse" by "- Name: Maya" and "User works at
    Initech as a nurse": the files say it, one fact a line)."""
    files = list(files)
    found = _first_stating(fact, files, loose)
    if found is not None:
        return found
    sentences = [s for s in split_sentences(fact) if any(keywords(s))]
    if len(sentences) < 2:
        return None
    where = [_first_stating(s, files, loose) for s in sentences]
    return where[0] if all(where) else None


def split_sentences(text: str) -> list[str]:
    """The sentences of one line of text, stripped (a fact line may hold several)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def _first_stating(fact: str, files: Sequence[tuple[str, str]], loose: bool) -> str | None:
    for name, text in files:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#") and states(line, fact, loose=loose):
                return f"{name}:{n}"
    return None


def normalize_line(line: str) -> str:
    """A line without list markers, emphasis, case and extra spaces
    (``- **Boat**: X`` ~ ``boat: x``)."""
    text = _LIST_MARK.sub("", unicodedata.normalize("NFKC", line))
    text = text.replace("**", "").replace("__", "").replace("`", "")
    return " ".join(text.lower().split())


def line_similarity(a: str, b: str) -> float:
    """0..1: how close two lines are once normalised (difflib's ratio)."""
    na, nb = normalize_line(a), normalize_line(b)
    if not na or not nb:
        return 0.0
    return 1.0 if na == nb else SequenceMatcher(None, na, nb).ratio()


def same_line(a: str, b: str) -> bool:
    """True when ``b`` is ``a`` again, or a close rewording of it."""
    return line_similarity(a, b) >= _SIMILAR


def covers(text: str, line: str, *, share: float = 0.6) -> bool:
    """Whether ``text`` carries at least ``share`` of the content words of ``line``.

    Words of scripts written without spaces (CJK) come out as long runs: those are looked
    for inside the text.
    """
    wanted = {stem(w) for w in content_words(line) if not _is_stop(w, filler=True)}
    if not wanted:
        return bool(normalize_line(line)) and normalize_line(line) in normalize_line(text)
    have = {stem(w) for w in content_words(text)}
    low = text.lower()
    found = [w for w in wanted if w in have or (not w.isascii() and w in low)]
    return len(found) >= share * len(wanted)


def grounded(line: str, source: str, *, share: float = 0.5) -> bool:
    """Whether ``line`` (written by a model) holds only what ``source`` (what it was given)
    says: every salient word (a name, a number) is in ``source`` and at least ``share`` of
    its other content words are. "- My name is Hippobot." is not grounded in a
    conversation with Maya; "- Lives in Osaka" is, in "User lives in Osaka now"."""
    salient, _ = keywords(line)
    have = _line_stems(source)
    if any(stem(w) not in have for w in salient):
        return False
    return covers(source, line, share=share)


# What a summary may work out rather than copy: a date or a time it resolved ("next Friday"
# to "Friday 11 December"), and the calendar's names.
_WORKED_OUT = lazy_compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}:\d{2}\b|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b"
)
_CALENDAR = frozenset(
    ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "today", "tomorrow", "yesterday"]
)


@dataclass(frozen=True, slots=True)
class Said:
    """The words of a text, read once for many :func:`unsaid_names` checks: a whole archive
    request is too large to go through the per-line stem cache."""

    stems: frozenset[str]
    heads: frozenset[str]  # each word's first three letters, accents aside

    @classmethod
    def of(cls, text: str) -> Said:
        stems = frozenset(stem(w) for w in words(text))
        return cls(stems, frozenset(_ascii(w)[:3] for w in stems))


def unsaid_names(line: str, said: Said) -> list[str]:
    """The names and codes of ``line`` that ``said`` (what the model was given) never says:
    a capitalised word, or a number of three digits or more, that is nowhere in it.
    Dates, times and calendar names are left alone: a summary may resolve "next Friday";
    a name counts as said when a word of ``source`` opens with its first three letters
    (accents aside), so a translated or inflected name stays.
    "The user corrected their name from Maya to Lily", summarised from a conversation
    where no Lily appears, gives ``["lily"]``."""
    salient, _ = keywords(_WORKED_OUT.sub(" ", line))
    unsaid = []
    for w in salient:
        if stem(w) in said.stems or w in _CALENDAR:
            continue
        digits = sum(c.isdigit() for c in w)
        if digits:
            if digits >= 3:
                unsaid.append(w)
        elif not _spelled_alike(w, said):
            unsaid.append(w)
    return sorted(unsaid)


def _spelled_alike(word: str, said: Said) -> bool:
    """Whether a word said opens as ``word`` does, accents aside: a summary in English of
    "Ich wohne in München" may say "Munich", and a German one capitalises its nouns."""
    head = _ascii(word)[:3]
    return len(head) == 3 and head in said.heads


def _ascii(word: str) -> str:
    return unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode().lower()


def heading_matches(heading: str, wanted: str) -> bool:
    """Whether a file's ``heading`` line is the section a model named ``wanted``
    (case, ``#`` marks, punctuation, plurals and small typos do not matter)."""
    a = " ".join(fold(w) for w in words(heading.lstrip("#")))
    b = " ".join(fold(w) for w in words(wanted.lstrip("#")))
    if not a or not b:
        return False
    if a == b:
        return True
    wa, wb = set(a.split()) - STOP_WORDS, set(b.split()) - STOP_WORDS
    if wb and wb <= wa and len(wb) * 2 >= len(wa):
        return True  # "Pets" names the heading "Pets and animals"
    return SequenceMatcher(None, a, b).ratio() >= _SIMILAR
