"""The periods of time a search names: "on 13 October 2023", "in July 2022", "last week".

A question about a day ("What did I say on May 8, 2023?", "what did we decide yesterday?")
is about what was said then, so search weighs documents dated within the named period
(:mod:`~hippobot.recall.ranking`'s ``dated`` evidence). Dates are read in English, the
way people write them: a day with its month and year in either order ("13 October 2023",
"October 13th, 2023", "Oct 13 2023"), ISO dates (2023-10-13), a month with its year ("July
2023"), a month alone ("in June": that month of each of the last ten years), a year ("in 2022"), and a few
relative phrases measured from ``now`` (today, yesterday, N days/weeks/months ago,
last/this week, month, year). Periods are local calendar days, as timestamps are shown.

Pure functions: text and a clock in, ``(start, end)`` epoch-second ranges out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, timedelta

from hippobot.lazy_regex import lazy_compile

__all__ = ["NUMBER_WORDS", "Period", "months_before", "named_periods"]

Period = tuple[float, float]  # [start, end) in epoch seconds, local time
_Made = Period | list[Period] | None

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
            ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
            ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}  # fmt: skip
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{0}>(?:19|20)\d\d)"
_DAY_MONTH_YEAR = lazy_compile(
    rf"\b{_DAY.format('d')}(?:\s+of)?\s+{_MONTH.format('m')},?\s+{_YEAR.format('y')}\b"
)
_MONTH_DAY_YEAR = lazy_compile(rf"\b{_MONTH.format('m')}\s+{_DAY.format('d')},?\s+{_YEAR.format('y')}\b")
_ISO = lazy_compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)\b")
_MONTH_YEAR = lazy_compile(rf"\b{_MONTH.format('m')},?\s+(?:of\s+)?{_YEAR.format('y')}\b")
# A month alone only after "in"/"during"/"of": "may" and "march" are also common words.
_MONTH_ALONE = lazy_compile(rf"\b(?:in|during|of|since)\s+(?:early\s+|late\s+|mid-?)?{_MONTH.format('m')}\b")
_YEAR_ALONE = lazy_compile(rf"(?<![\d-]){_YEAR.format('y')}(?![\d-])")
_AGO = lazy_compile(r"\b(?P<n>\d+|a|an|one|two|three|four|five|six)\s+(?P<unit>day|week|month|year)s?\s+ago\b")
_RELATIVE = lazy_compile(r"\b(?P<which>today|yesterday|(?:last|this|past)\s+(?:week|month|year))\b")
# Counts written as words, for "two weeks ago" here and in recall.relative_dates.
NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip
_MONTH_ALONE_YEARS = 10  # "in June": Junes of the last ten years


def _day(y: int, m: int, d: int) -> Period | None:
    try:
        start = datetime(y, m, d)
    except ValueError:
        return None
    return start.timestamp(), (start + timedelta(days=1)).timestamp()


def _month(y: int, m: int) -> Period:
    start = datetime(y, m, 1)
    end = datetime(y + 1, 1, 1) if m == 12 else datetime(y, m + 1, 1)
    return start.timestamp(), end.timestamp()


def _days(first: date, last: date) -> Period:
    """From the start of ``first`` to the end of ``last``."""
    start = datetime(first.year, first.month, first.day)
    end = datetime(last.year, last.month, last.day) + timedelta(days=1)
    return start.timestamp(), end.timestamp()


def months_before(d: date, months: int) -> date:
    """The first day of the month ``months`` before ``d``'s (after it, when negative)."""
    index = d.year * 12 + d.month - 1 - months
    return date(index // 12, index % 12 + 1, 1)


def _relative(which: str, today: date) -> Period:
    which = " ".join(which.split())
    if which == "today":
        return _days(today, today)
    if which == "yesterday":
        return _days(today - timedelta(days=1), today - timedelta(days=1))
    this, unit = which.split()
    if unit == "week":
        monday = today - timedelta(days=today.weekday())
        if this == "this":
            return _days(monday, today)
        if this == "past":
            return _days(today - timedelta(days=7), today)
        return _days(monday - timedelta(days=7), monday - timedelta(days=1))
    if unit == "month":
        first = today.replace(day=1)
        if this == "this":
            return _days(first, today)
        if this == "past":
            return _days(today - timedelta(days=31), today)
        return _month(months_before(first, 1).year, months_before(first, 1).month)
    if this == "this":
        return _days(date(today.year, 1, 1), today)
    if this == "past":
        return _days(today - timedelta(days=366), today)
    return _days(date(today.year - 1, 1, 1), date(today.year - 1, 12, 31))


def _ago(n: int, unit: str, today: date) -> Period:
    """"3 days ago" is that day; "2 weeks ago" that week; "a month ago" that month..."""
    if unit == "day":
        day = today - timedelta(days=n)
        return _days(day, day)
    if unit == "week":
        mid = today - timedelta(weeks=n)
        return _days(mid - timedelta(days=3), mid + timedelta(days=3))
    if unit == "month":
        shifted = months_before(today.replace(day=1), n)
        return _month(shifted.year, shifted.month)
    return _days(date(today.year - n, 1, 1), date(today.year - n, 12, 31))


def named_periods(text: str, now: float) -> list[Period]:
    """The periods ``text`` names, most precise first (a day before its month's year).

    A year written inside a full date is not also a period of its own, so "May 8, 2023"
    means that day, not all of 2023.
    """
    lower = text.casefold()
    periods: list[Period] = []
    used: list[tuple[int, int]] = []

    def take(pattern: re.Pattern[str], make: Callable[[re.Match[str]], _Made]) -> None:
        for m in pattern.finditer(lower):
            if any(a < m.end() and m.start() < b for a, b in used):
                continue
            period = make(m)
            if period is not None:
                periods.extend(period if isinstance(period, list) else [period])
                used.append(m.span())

    def month_of(m: re.Match[str]) -> int:
        return _MONTHS[m.group("m").rstrip(".")]

    take(_DAY_MONTH_YEAR, lambda m: _day(int(m["y"]), month_of(m), int(m["d"])))
    take(_MONTH_DAY_YEAR, lambda m: _day(int(m["y"]), month_of(m), int(m["d"])))
    take(_ISO, lambda m: _day(int(m["y"]), int(m["m"]), int(m["d"])) if 1 <= int(m["m"]) <= 12 else None)
    take(_MONTH_YEAR, lambda m: _month(int(m["y"]), month_of(m)))
    today = datetime.fromtimestamp(now).date()
    take(_MONTH_ALONE, lambda m: [
        _month(y, month_of(m)) for y in range(today.year - _MONTH_ALONE_YEARS + 1, today.year + 1)
    ])  # fmt: skip
    take(_YEAR_ALONE, lambda m: _days(date(int(m["y"]), 1, 1), date(int(m["y"]), 12, 31)))
    take(_AGO, lambda m: _ago(NUMBER_WORDS.get(m["n"]) or int(m["n"]), m["unit"], today))
    take(_RELATIVE, lambda m: _relative(m["which"], today))
    return periods
