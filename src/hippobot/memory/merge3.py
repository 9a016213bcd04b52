"""Line-based three-way merge of texts (str or bytes) that share a common base.

Used to undo one memory version while keeping every later edit. Invariants:

* Lines keep their newline, so a merge of unchanged inputs gives the input back
  byte for byte (CRLF and a missing final newline included).
* A merge never guesses: when both sides change the same lines, or insert at the same
  point, in different ways, the result is None (a conflict).
* ``merge_lines(b, o, b) == o``, ``merge_lines(b, b, t) == t``, ``merge_lines(b, x, x) == x``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import AnyStr

from hippobot.lazy_regex import lazy_compile

__all__ = ["merge3", "merge_lines"]

_LINE = lazy_compile(r"[^\n]*\n|[^\n]+\Z")
_LINE_B = lazy_compile(rb"[^\n]*\n|[^\n]+\Z")


@dataclass(frozen=True)
class _Hunk:
    start: int  # base[start:end] is replaced by lines
    end: int
    lines: list
    side: int  # 0 = ours, 1 = theirs


def _hunks(base: Sequence, other: Sequence, side: int) -> list[_Hunk]:
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [
        _Hunk(i1, i2, list(other[j1:j2]), side)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _joins(lo: int, hi: int, hunk: _Hunk) -> bool:
    """Does ``hunk`` (sorted after the cluster base[lo:hi]) clash with it?

    Hunks clash when they share a base line, when an insertion falls strictly inside
    the other's range, or when both insert at the same point. Hunks that merely touch
    (one ends where the other starts) are merged side by side.
    """
    if hunk.start < hi:
        return True
    return hunk.start == hi and lo == hi and hunk.start == hunk.end


def _apply(base: Sequence, lo: int, hi: int, hunks: list[_Hunk]) -> list:
    out: list = []
    pos = lo
    for h in hunks:
        out.extend(base[pos : h.start])
        out.extend(h.lines)
        pos = h.end
    out.extend(base[pos:hi])
    return out


def merge_lines(base: Sequence, ours: Sequence, theirs: Sequence) -> list | None:
    """Line-wise three-way merge; None when both sides change the same lines differently.

    Invariants: ``merge_lines(b, o, b) == o``, ``merge_lines(b, b, t) == t`` and
    ``merge_lines(b, x, x) == x``.
    """
    hunks = sorted(
        [*_hunks(base, ours, 0), *_hunks(base, theirs, 1)], key=lambda h: (h.start, h.end)
    )
    out: list = []
    pos = i = 0
    while i < len(hunks):
        lo, hi = hunks[i].start, hunks[i].end
        group = [hunks[i]]
        i += 1
        while i < len(hunks) and _joins(lo, hi, hunks[i]):
            group.append(hunks[i])
            hi = max(hi, hunks[i].end)
            i += 1
        out.extend(base[pos:lo])
        mine = _apply(base, lo, hi, [h for h in group if h.side == 0])
        other = _apply(base, lo, hi, [h for h in group if h.side == 1])
        sides = {h.side for h in group}
        if sides == {0}:
            out.extend(mine)
        elif sides == {1} or mine == other:
            out.extend(other)
        else:
            return None
        pos = hi
    out.extend(base[pos:])
    return out


def _split(text: AnyStr) -> list[AnyStr]:
    """Lines with their newline kept; ``"".join`` gives the text back exactly."""
    pattern = _LINE if isinstance(text, str) else _LINE_B
    return pattern.findall(text)


def merge3(base: AnyStr, ours: AnyStr, theirs: AnyStr) -> AnyStr | None:
    """Three-way merge of two texts (str or bytes) that share ``base``; None on conflict."""
    merged = merge_lines(_split(base), _split(ours), _split(theirs))
    return None if merged is None else base[:0].join(merged)
