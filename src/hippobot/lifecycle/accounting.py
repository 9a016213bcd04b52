"""Dream's accounting: what became of every durable fact of a batch (SPEC 4.4).

A Dream batch may only move the cursor past its entries when each ``[permanent]``,
``[durable]`` and ``[correction]`` line in them has an outcome:

``written``   a memory file now states it (file and line),
``known``     a memory file already stated it before the batch (where),
``rejected``  the model declined it with a reason (``[SKIP] "<fact>" — reason``; a
              ``[permanent]`` fact, which the user asked to keep, only when a later line of
              the batch replaces it; no fact for being "ephemeral": the archive's tag
              already says it lasts), a later correction supersedes it, or the user
              reverted it (``do_not_readd``).

Which earlier fact a correction replaces is read from the line, not guessed: consolidation
writes ``(replaces #12: <the earlier fact>)``; older entries say "X, not Y"
(:meth:`Fact.replaces`). Every text comparison is the fact matcher's
(:mod:`hippobot.factmatch`).

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

from hippobot.factmatch import find_statement, keywords, mentions_old_value, same_line, states, stem
from hippobot.lazy_regex import lazy_compile
from hippobot.memory.facts import (
    Replaces,
    fact_lines,
    replaced_value,
    replaces_ref,
    split_correction,
)
from hippobot.memory.history import HistoryEntry

__all__ = [
    "Fact", "Outcome", "account", "batch_facts", "format_outcomes", "old_value", "superseded_by", "unaccounted",
]

Status = Literal["written", "known", "rejected", "missing", "stale"]


@dataclass(frozen=True, slots=True)
class Fact:
    cursor: int
    kind: str
    text: str

    @property
    def claim(self) -> str:
        """What a file must state: for a correction, its new value."""
        return self._split()[0]

    @property
    def old(self) -> str | None:
        """The value it replaces: of a correction, or of a line that says "X, not Y"."""
        return self._split()[1]

    def _split(self) -> tuple[str, str | None]:
        return split_correction(self.text, strict=self.kind != "correction")

    @property
    def corrects(self) -> bool:
        """Whether the line replaces an earlier value: tagged a correction, or (whatever its
        tag; a small model's summary wrote "[durable] User lives in Osaka now, not in
        Tokyo") it says "X, not Y". The stale check already read such a line so; the
        supersession must too, or the batch writes the old value and holds itself."""
        return self.kind == "correction" or self.old is not None

    @property
    def ref(self) -> Replaces | None:
        """The earlier fact this line names as the one it replaces, if it names one."""
        return replaces_ref(self.text)[1]

    def replaces(self, earlier: Fact) -> bool:
        """Whether this (later) line of the batch replaces ``earlier``.

        With a reference (``(replaces #12: ...)``, written by consolidation): the fact it
        names, by cursor and text. Without one (older entries): a line that says
        "X, not Y" (whatever its tag) about a fact that still says Y.
        """
        if earlier is self or self.cursor < earlier.cursor:
            return False
        ref = self.ref
        if ref is not None:
            if ref.cursor is not None and ref.cursor != earlier.cursor:
                return False
            if ref.text is not None:
                return states(earlier.text, ref.text) or same_line(earlier.text, ref.text)
            # Only the entry is named: the fact of it that is about the same thing.
            return bool(_topic(earlier.text) & _topic(self.claim))
        new, old = self._split()
        return old is not None and mentions_old_value(earlier.text, old, new)


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


def _topic(text: str) -> set[str]:
    return {stem(w) for w in keywords(text)[1]}


def superseded_by(fact: Fact, facts: Sequence[Fact]) -> Fact | None:
    """A later correction of the batch that replaces ``fact`` (and does not restate it)."""
    for later in facts:
        if later.corrects and later.replaces(fact) and not states(fact.text, later.claim, loose=True):
            return later
    return None


def old_value(fact: Fact, facts: Sequence[Fact]) -> str | None:
    """What a correction's new value replaces: named in its line, or, when it names only the
    entry (``(replaces #12)``), what the replaced fact of the batch says that it does not."""
    if fact.old:
        return fact.old
    if fact.kind != "correction":
        return None
    for earlier in facts:
        if earlier is not fact and fact.replaces(earlier):
            return replaced_value(earlier.text, fact.claim)
    return None


def _revisited(fact: Fact, facts: Sequence[Fact]) -> bool:
    """Whether a later line of the batch replaces ``fact`` (a correction, a retraction):
    only then may the model decline a fact the user asked to keep."""
    return any(later.replaces(fact) for later in facts)


_RETAGGED = lazy_compile(
    r"\b(ephemeral|(?:no longer|not) relevant|irrelevant"
    r"|no longer (?:true|valid|accurate|current|the case)|not true any ?more"
    r"|replaced|outdated|out of date|stale|superseded|obsolete)\b",
    re.I,
)
"""Reasons that overrule the archive's tag rather than judge the fact: "ephemeral" is the
tag consolidation did not give it, and relevance "to the current conversation" is beside
the point of a file kept for later ones. A fact "no longer true" or "replaced" is one a
later line of the batch replaces, and then it is declined anyway; said of a fact no line
replaces, it is the model's guess (the local model skipped "The garden was planted with
tomatoes and basil this spring." as "no longer true, replaced by the new information").
"Transient mood", "passing weather talk" still decline: they say something of the fact
itself."""


def _calls_it_passing(reason: str) -> bool:
    """Whether a model's reason for declining a durable fact only re-tags it."""
    return _RETAGGED.search(reason) is not None


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
        if (later := superseded_by(fact, facts)) is not None:
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
            # Nor may it decline the correction that made an earlier line of the batch
            # stale: the local model declined "User lives in Osaka now, not in Tokyo" as
            # "Stale data." beside "User lives in Tokyo.", and no city reached the files.
            corrects_one = any(superseded_by(other, facts) is fact for other in facts if other is not fact)
            declinable = (fact.kind != "permanent" and not corrects_one) or _revisited(fact, facts)
            reason = _rejection(fact, rejections) if declinable else None
            if reason is not None and _calls_it_passing(reason) and not _revisited(fact, facts):
                # The archive already tagged the fact to keep, with the whole conversation in
                # view; a model that calls it "ephemeral" is disagreeing with that tag, not
                # declining it for a reason of its own (a small model "rejected" a cat's name).
                reason = None
            if reason is not None:
                outcomes.append(Outcome(fact, "rejected", reason=reason))
            else:
                outcomes.append(Outcome(fact, "missing"))
            continue
        old = old_value(fact, facts)
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
