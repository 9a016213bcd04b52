"""What "yesterday" meant when it was said: relative times in a dated message, made absolute.

A recalled message says "I ran a charity race last Saturday"; the question is "When did
Melanie run the race?". The message's date is on its line, but working out which Saturday
that was is date arithmetic, which small models get wrong or skip (they answer "last
Saturday", true only on the day it was said). So the lines recalled before answering
carry the date each relative phrase names, computed from the message's own timestamp:
"last Saturday (= Saturday 20 May 2023)". The model decides what the answer is; the code
does the calendar.

Read in English, the way people say it: today, tonight, this morning/afternoon/evening,
yesterday, last night, tomorrow; N days/weeks/months/years ago (digits, "a", "an", "one" to
"ten", "a few", "a couple of"); last/this past/next with a weekday, "weekend", "week",
"month" or "year". A phrase already followed by a date is left alone.

Pure functions: text and the moment it was said in, annotated text out.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from hippobot.lazy_regex import lazy_compile

from .periods import NUMBER_WORDS, months_before

__all__ = ["annotate_relative_dates", "relative_dates"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_UNITS = r"(?:day|week|month|year)s?"
_PHRASE = lazy_compile(
    r"\b(?:"
    r"(?P<day>today|tonight|this\s+(?:morning|afternoon|evening)|yesterday|last\s+night|tomorrow)"
    rf"|(?P<n>\d{{1,2}}|a\s+few|a\s+couple\s+of|{'|'.join(NUMBER_WORDS)})"
    rf"\s+(?P<unit>{_UNITS})\s+ago"
    r"|(?P<which>last|this\s+past|past|next)\s+"
    rf"(?P<what>{'|'.join(_WEEKDAYS)}|weekend|week|month|year)"
    r")\b",
    re.IGNORECASE,
)
# A phrase the speaker dated already ("yesterday, 3 May", "last week (May 8)") needs no help.
_DATED_AFTER = lazy_compile(
    r"\s*[,(]?\s*(?:on\s+)?(?:\d{1,4}[-/ ]|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d)",
    re.IGNORECASE,
)


def _day(d: date) -> str:
    return f"{d.day} {d:%B %Y}"


def _weekday(d: date) -> str:
    return f"{d:%A} {_day(d)}"


def _meaning(m: re.Match[str], said: date) -> str | None:
    """The date (or span) the phrase of ``m`` names, said on ``said``."""
    if word := m["day"]:
        word = " ".join(word.lower().split())
        if word in ("yesterday", "last night"):
            return _day(said - timedelta(days=1))
        if word == "tomorrow":
            return _day(said + timedelta(days=1))
        return _day(said)
    if m["unit"]:
        unit = m["unit"].lower().rstrip("s")
        n_text = " ".join(m["n"].lower().split())
        if n_text in ("a few", "a couple of"):
            return f"a {'few' if n_text == 'a few' else 'couple of'} {unit}s before {_day(said)}"
        n = NUMBER_WORDS.get(n_text) or int(n_text)
        if unit == "day":
            return _day(said - timedelta(days=n))
        if unit == "week":
            return f"around {_day(said - timedelta(weeks=n))}"
        if unit == "month":
            return f"{months_before(said, n):%B %Y}"
        return str(said.year - n)
    which = " ".join(m["which"].lower().split())
    what = m["what"].lower()
    ahead = which == "next"
    if what in _WEEKDAYS:
        target = _WEEKDAYS.index(what)
        if ahead:
            return _weekday(said + timedelta(days=(target - said.weekday()) % 7 or 7))
        return _weekday(said - timedelta(days=(said.weekday() - target) % 7 or 7))
    if what == "weekend":
        if ahead:  # the first Saturday after the day it was said
            saturday = said + timedelta(days=(5 - said.weekday()) % 7 or 7)
        else:  # the weekend before the week it was said in
            saturday = said - timedelta(days=said.weekday() + 2)
        return f"the weekend of {saturday.day}-{_day(saturday + timedelta(days=1))}"
    if what == "week":
        monday = said - timedelta(days=said.weekday()) + timedelta(weeks=1 if ahead else -1)
        return f"the week of {_day(monday)}"
    if what == "month":
        return f"{months_before(said, -1 if ahead else 1):%B %Y}"
    return str(said.year + (1 if ahead else -1))


def _found(text: str, said: datetime) -> list[tuple[re.Match[str], str]]:
    out = []
    for m in _PHRASE.finditer(text):
        if _DATED_AFTER.match(text, m.end()):
            continue
        meaning = _meaning(m, said.date())
        if meaning:
            out.append((m, meaning))
    return out


def relative_dates(text: str, said: datetime) -> list[tuple[str, str]]:
    """``(phrase, what it names)`` for each relative time in ``text``, said at ``said``."""
    return [(m.group(0), meaning) for m, meaning in _found(text, said)]


def annotate_relative_dates(text: str, said: datetime) -> str:
    """``text`` with each relative time followed by the date it names:
    "last Saturday" said on Thursday 25 May 2023 becomes "last Saturday (= Saturday 20 May
    2023)"."""
    pieces, last = [], 0
    for m, meaning in _found(text, said):
        pieces.append(f"{text[last:m.end()]} (= {meaning})")
        last = m.end()
    pieces.append(text[last:])
    return "".join(pieces)
