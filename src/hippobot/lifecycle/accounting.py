"""Dream's accounting: what became of every durable fact of a batch (SPEC 4.4).

A Dream batch may only move the cursor past its entries when each ``[permanent]``,
``[durable]`` and ``[correction]`` line in them has an outcome:

``written``   a memory file now states it (file and line),
``known``     a memory file already stated it before the batch (where),
``rejected``  the model declined it with a reason (``[SKIP] "<fact>" — reason``; a
              ``[permanent]`` fact, which the user asked to keep, only when a later line of
              the batch comes back to it), a later correction supersedes it, or the user
              reverted it (``do_not_readd``).

Anything else is ``missing``, and a correction whose old value some file still states as
current is ``stale``: both keep the batch pending.

The check looks only at the resulting files, never at how the edits were made (tool calls,
a text edit format, a person), so every way of editing is accounted the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hippobot.memory.facts import (
    fact_lines,
    find_statement,
    mentions_old_value,
    split_correction,
    states,
)
from hippobot.memory.history import HistoryEntry

__all__ = ["Fact", "Outcome", "account", "batch_facts", "format_outcomes", "unaccounted"]

Status = Literal["written", "known", "rejected", "missing", "stale"]


@dataclass(frozen=True, slots=True)
class Fact:
    cursor: int
    kind: str
    text: str

    @property
    def claim(self) -> str:
        """What a file must state: for a correction, its new value."""
        return split_correction(self.text)[0] if self.kind == "correction" else self.text

    @property
    def old(self) -> str | None:
        return split_correction(self.text)[1] if self.kind == "correction" else None


@dataclass(frozen=True, slots=True)
class Outcome:
    fact: Fact
    status: Status
    where: str = ""  # "USER.md:4"
    reason: str = ""

    @property
    def accounted(self) -> bool:
        return self.status in ("written", "known", "rejected")

    def describe(self) -> str:
        label = {
            "written": f"written to {self.where}",
            "known": f"already known ({self.where})",
            "rejected": f"rejected: {self.reason}",
            "missing": f"not accounted for: {self.reason or 'no memory file states it'}",
            "stale": f"not accounted for: {self.where} still says the old value",
        }[self.status]
        return f"#{self.fact.cursor} [{self.fact.kind}] {self.fact.text} — {label}"


def batch_facts(entries: Iterable[HistoryEntry]) -> list[Fact]:
    """The durable and correction lines of ``entries``, in order, without repeats."""
    out: list[Fact] = []
    seen: set[str] = set()
    for entry in entries:
        for line in fact_lines(entry.content):
            if line.durable and line.text.lower() not in seen:
                seen.add(line.text.lower())
                out.append(Fact(entry.cursor, line.kind, line.text))
    return out


def _superseded_by(fact: Fact, facts: Sequence[Fact]) -> Fact | None:
    for later in facts:
        if later.kind != "correction" or later is fact or later.cursor < fact.cursor:
            continue
        old = later.old
        if old and mentions_old_value(fact.text, old, later.claim) and not states(
            fact.text, later.claim, loose=True
        ):
            return later
    return None


_COMMON = frozenset({
    "user", "said", "that", "this", "with", "have", "from", "about", "what", "when", "where",
    "which", "there", "their", "they", "them", "please", "remember", "would", "could",
    "should", "been", "were", "will", "your", "just", "also", "like", "very", "really",
})


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]{4,}", text.lower()) if w not in _COMMON}


def _revisited(fact: Fact, facts: Sequence[Fact]) -> bool:
    """Whether a later fact of the batch mentions a word of ``fact`` again."""
    words = _words(fact.claim)
    later_facts = facts[facts.index(fact) + 1 :]
    return any(
        later != fact and later.cursor >= fact.cursor and words & _words(later.text)
        for later in later_facts
    )


def _rejection(fact: Fact, rejections: Sequence[tuple[str, str]]) -> str | None:
    for text, reason in rejections:
        if states(text, fact.claim):
            return reason or "declined by the model"
    return None


def account(
    facts: Sequence[Fact],
    before: Mapping[str, str],
    after: Mapping[str, str],
    *,
    rejections: Sequence[tuple[str, str]] = (),
    do_not_readd: Sequence[str] = (),
) -> list[Outcome]:
    """One outcome per fact, judged on the memory files ``before`` and ``after`` the edits."""
    outcomes: list[Outcome] = []
    for fact in facts:
        loose = fact.kind == "correction"
        if (later := _superseded_by(fact, facts)) is not None:
            outcomes.append(Outcome(fact, "rejected", reason=f"superseded by the correction in #{later.cursor}"))
            continue
        if any(states(line, fact.claim) for line in do_not_readd):
            outcomes.append(Outcome(fact, "rejected", reason="the user reverted it"))
            continue
        now = find_statement(fact.claim, after.items(), loose=loose)
        if now is None:
            # The user asked for a [permanent] fact to be kept: the model may decline it only
            # when a later line of the batch comes back to it (a correction, a retraction),
            # not on its own say-so (a small model "skipped" "I work at Initech as a nurse").
            declinable = fact.kind != "permanent" or _revisited(fact, facts)
            reason = _rejection(fact, rejections) if declinable else None
            if reason is not None:
                outcomes.append(Outcome(fact, "rejected", reason=reason))
            else:
                outcomes.append(Outcome(fact, "missing"))
            continue
        old = fact.old
        if old:
            stale = _stale_line(old, fact.claim, after)
            if stale is not None:
                outcomes.append(Outcome(fact, "stale", where=stale))
                continue
        earlier = find_statement(fact.claim, before.items(), loose=loose)
        if earlier is not None:
            outcomes.append(Outcome(fact, "known", where=earlier))
        else:
            outcomes.append(Outcome(fact, "written", where=now))
    return outcomes


def _stale_line(old: str, new: str, files: Mapping[str, str]) -> str | None:
    for name, text in files.items():
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip() and mentions_old_value(line, old, new):
                return f"{name}:{n}"
    return None


def unaccounted(outcomes: Iterable[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if not o.accounted]


def format_outcomes(outcomes: Sequence[Outcome], *, limit: int = 40) -> str:
    lines = [o.describe() for o in outcomes[:limit]]
    if len(outcomes) > limit:
        lines.append(f"... and {len(outcomes) - limit} more")
    return "\n".join(lines)
