"""Memory that fits a budget by relevance, instead of a cut mid-file.

When USER.md and MEMORY.md together exceed their share of the prompt, each is shown as the
items most relevant to the conversation (plus items marked always), in file order under
their headings, followed by a note listing what was left out and how to open it. Nothing is
cut silently, and a file that fits is shown whole, byte for byte.

Pure functions of their inputs. The caller chooses a relevance *anchor* that changes only at
memory events (the first message the prompt replays, and the Recent History lines), so the
selection, and with it the cached prompt prefix, stays the same from turn to turn.

Units: a Markdown file is split into items: a list item with its continuation lines, or a
paragraph. Headings are not items; an item keeps the headings above it for display.
Marking: an item, or a heading (then everything under it), containing ``<!-- always -->``
is always shown.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hippobot.factmatch import content_words
from hippobot.lazy_regex import lazy_compile

__all__ = ["ALWAYS_MARK", "MemoryView", "relevance_terms", "select_memory", "split_budget"]

ALWAYS_MARK = "<!-- always -->"
_NOTE_HEADINGS = 6  # left-out sections named in the note
_HEADING = lazy_compile(r"^(#{1,6})\s+(.*\S)\s*$")
_BULLET = lazy_compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+")


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What the prompt shows of one file."""

    text: str
    total_items: int
    shown_items: int
    omitted_headings: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.shown_items == self.total_items


@dataclass(frozen=True, slots=True)
class _Item:
    index: int
    line: int  # 1-based line number of the item's first line
    headings: tuple[str, ...]  # the heading lines above it, outermost first
    text: str
    always: bool


def relevance_terms(text: str) -> Counter[str]:
    """Content words of ``text`` as the fact matcher folds them (stop words dropped, a
    plural ``s`` folded), counted."""
    return Counter(content_words(text))


def _items(text: str) -> list[_Item]:
    items: list[_Item] = []
    stack: list[tuple[int, str, bool]] = []  # (level, heading line, always)
    current: list[str] = []
    start = 0

    def flush() -> None:
        nonlocal current
        body = "\n".join(current).strip("\n")
        if body.strip():
            headings = tuple(h for _, h, _ in stack)
            always = ALWAYS_MARK in body or any(a for _, _, a in stack)
            items.append(_Item(len(items), start, headings, body, always))
        current = []

    for number, line in enumerate(text.split("\n"), start=1):
        heading = _HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, line.rstrip(), ALWAYS_MARK in line))
            continue
        if not line.strip():
            flush()
            continue
        if _BULLET.match(line) and current:
            flush()
        if not current:
            start = number
        current.append(line)
    flush()
    return items


def _score(item: _Item, anchor: Counter[str], df: Counter[str], n: int) -> float:
    terms = relevance_terms(item.text + " " + " ".join(item.headings))
    score = 0.0
    for term, weight in anchor.items():
        if term in terms:
            idf = math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * (1.0 + math.log(weight)) * (1.0 + math.log(terms[term]))
    return score


def select_memory(
    text: str,
    *,
    budget_tokens: int,
    anchor: str,
    file_label: str,
    count_tokens: Callable[[str], int],
) -> MemoryView:
    """``text`` whole if it fits ``budget_tokens``; else its most relevant items that fit.

    Items marked always come first, then by relevance to ``anchor`` (ties: later items,
    which are usually the newer facts, first). The note that ends a partial view names the
    left-out headings and says how to read them (``memory_get`` / ``read_file``).
    """
    items = _items(text)
    if count_tokens(text) <= budget_tokens or not items:
        return MemoryView(text, len(items), len(items))
    anchor_terms = relevance_terms(anchor)
    df: Counter[str] = Counter()
    for item in items:
        df.update(set(relevance_terms(item.text + " " + " ".join(item.headings))))
    ranked = sorted(
        items,
        key=lambda it: (not it.always, -_score(it, anchor_terms, df, len(items)), -it.index),
    )
    room = max(0, budget_tokens - 40 - 2 * count_tokens(file_label))
    chosen: list[int] = []  # best first
    used = 0
    for item in ranked:
        cost = count_tokens(item.text) + 1
        new_headings = [h for h in item.headings if not _heading_shown(h, chosen, items)]
        cost += sum(count_tokens(h) + 1 for h in new_headings)
        if used + cost > room:
            continue
        chosen.append(item.index)
        used += cost
    # The estimate ignores the note's length: drop the least relevant until it all fits.
    view = _render(items, set(chosen), file_label)
    while chosen and count_tokens(view.text) > budget_tokens:
        chosen.pop()
        view = _render(items, set(chosen), file_label)
    return view


def _heading_shown(heading: str, chosen: Sequence[int], items: Sequence[_Item]) -> bool:
    return any(heading in items[i].headings for i in chosen)


def _render(items: Sequence[_Item], chosen: set[int], file_label: str) -> MemoryView:
    lines: list[str] = []
    printed: list[str] = []
    omitted: dict[str, int] = {}
    first_omitted_line: int | None = None
    for item in items:
        if item.index not in chosen:
            label = item.headings[-1].lstrip("#").strip() if item.headings else "(top of file)"
            omitted[label] = omitted.get(label, 0) + 1
            if first_omitted_line is None:
                first_omitted_line = item.line
            continue
        # print the headings this item needs that are not printed yet (common prefix kept)
        keep = 0
        while keep < len(printed) and keep < len(item.headings) and printed[keep] == item.headings[keep]:
            keep += 1
        for heading in item.headings[keep:]:
            if lines:
                lines.append("")
            lines.append(heading)
        printed = list(item.headings)
        if lines and not lines[-1].startswith("#") and not _BULLET.match(item.text):
            lines.append("")
        lines.append(item.text)
    left = len(items) - len(chosen)
    names = [f"{name} ({count})" for name, count in omitted.items()]
    if len(names) > _NOTE_HEADINGS:
        names = [*names[:_NOTE_HEADINGS], f"{len(names) - _NOTE_HEADINGS} more sections"]
    parts = ", ".join(names)
    where = f"{file_label}:{first_omitted_line}" if first_omitted_line else file_label
    lines += [
        "",
        f"[{file_label}: {len(chosen)} of {len(items)} items shown, chosen for this "
        f"conversation; {left} left out under: {parts}. Read them with "
        f"memory_get(\"{where}\") or read_file(\"{file_label}\").]",
    ]
    return MemoryView("\n".join(lines), len(items), len(chosen), tuple(omitted))


def split_budget(share_tokens: int, sizes: Sequence[int]) -> list[int]:
    """Share ``share_tokens`` among files of token ``sizes``: a file that fits its even
    share keeps its size, the rest is divided among the larger ones (water-filling)."""
    budgets = [0] * len(sizes)
    todo = sorted(range(len(sizes)), key=lambda i: sizes[i])
    left = share_tokens
    while todo:
        even = left // len(todo)
        i = todo[0]
        if sizes[i] <= even:
            budgets[i] = sizes[i]
            left -= sizes[i]
            todo.pop(0)
            continue
        for j in todo:
            budgets[j] = even
        break
    return budgets
