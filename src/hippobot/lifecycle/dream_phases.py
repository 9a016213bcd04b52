"""Dream's phases, as functions over one small state value per batch (:class:`Batch`).

    select_batches → analyse → apply → account → (ask_missing → apply → account)
                   → keep_what_was_kept_for → account        then the run commits (dream.py)

- :func:`analyse` — the model reads the batch and the files and lists findings (asked
  once more when the answer is empty or follows no format).
- :func:`apply` — the code applies the findings to the texts (:mod:`dream_apply`).
- :func:`account` — every durable fact of the batch gets an outcome (:mod:`accounting`).
- :func:`ask_missing` — facts still unaccounted for are listed to the model once more: a
  finding for each, or a ``[SKIP]`` with a reason.
- :func:`keep_what_was_kept_for` — a fact the model neither placed nor declined is placed
  by the code as the history states it: the guide says durable facts are kept, and a small
  model that forgets a line must not decide that the fact is lost.

A batch whose facts are still not accounted for after that (the analysis never followed
the format, or a correction's old value sits on a line that also says something else) is
*held*: none of its edits are kept and its entries stay pending.

Pure apart from the model calls (``analyse``, ``ask_missing``): the texts live in the
:class:`Batch`, and only the caller reads or writes files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hippobot.lifecycle.accounting import (
    Fact,
    Outcome,
    batch_facts,
    old_value,
    superseded_by,
    unaccounted,
)
from hippobot.lifecycle.accounting import account as account_facts
from hippobot.lifecycle.dream_apply import apply_findings, as_memory_line
from hippobot.lifecycle.dream_findings import (
    Finding,
    parse_finding,
    parse_findings,
    parse_rejections,
)
from hippobot.memory.history import HistoryEntry
from hippobot.memory.ledger import RevertedLine, content_lines, restates
from hippobot.prompts import render
from hippobot.providers.base import ChatRequest, Provider, collect
from hippobot.workspace import MEMORY_FILES, MEMORY_MD, SOUL_MD, USER_MD, Workspace

__all__ = [
    "Batch",
    "DreamModel",
    "account",
    "analyse",
    "apply",
    "ask_missing",
    "chunks",
    "guide_text",
    "keep_what_was_kept_for",
    "read_files",
    "select_batches",
    "show_file",
    "withhold_reverted",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
ENTRY_CAP = 2000  # characters of one history entry shown to the model
_FILE_CAP = 12_000
_LEDGER_SHOWN = 50  # newest reverted lines shown to the analysis


@dataclass(frozen=True, slots=True)
class DreamModel:
    """What the phases need of the model: a provider (Dream's, with its token budget), the
    model's name and its limits."""

    provider: Provider
    name: str
    max_tokens: int
    temperature: float | None = None

    async def ask(self, prompt: str) -> str:
        request = ChatRequest(
            model=self.name, messages=[{"role": "user", "content": prompt}],
            max_tokens=min(4096, self.max_tokens), temperature=self.temperature,
        )
        return (await collect(self.provider.stream(request))).text or ""


@dataclass(slots=True)
class Batch:
    """One batch on its way through the phases: its facts, the texts before and now, and
    what each phase found."""

    entries: Sequence[HistoryEntry]
    before: dict[str, str]
    files: dict[str, str]
    facts: list[Fact] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    rejections: list[tuple[str, str]] = field(default_factory=list)
    placed: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    valid: bool = True  # whether the analysis followed the format

    @classmethod
    def start(cls, entries: Sequence[HistoryEntry], files: Mapping[str, str]) -> Batch:
        return cls(entries, dict(files), dict(files), facts=batch_facts(entries))

    @property
    def span(self) -> str:
        return f"#{self.entries[0].cursor}-#{self.entries[-1].cursor}"

    @property
    def missing(self) -> list[Outcome]:
        return unaccounted(self.outcomes)


# --- selecting ----------------------------------------------------------------------------


def select_batches(
    pending: Sequence[HistoryEntry], *, size: int, token_cap: int | None
) -> list[Sequence[HistoryEntry]]:
    """At most ``size`` entries each and, with a cap, at most ``token_cap`` tokens of entry
    text, so Dream's requests fit a small window too."""
    from hippobot.context.tokens import count_text

    out: list[Sequence[HistoryEntry]] = []
    current: list[HistoryEntry] = []
    used = 0
    for entry in pending:
        cost = count_text(entry.content[:ENTRY_CAP]) + 12
        if len(current) >= size or (token_cap is not None and current and used + cost > token_cap):
            out.append(current)
            current, used = [], 0
        current.append(entry)
        used += cost
    if current:
        out.append(current)
    return out


def chunks(items: Sequence[T], *, token_cap: int | None) -> list[Sequence[T]]:
    """``items`` (findings or outcomes) split so that one request about them fits."""
    from hippobot.context.tokens import count_text

    if not items:
        return []
    if token_cap is None:
        return [items]
    out: list[Sequence[T]] = []
    current: list[T] = []
    used = 0
    for item in items:
        text = item if isinstance(item, str) else getattr(getattr(item, "fact", None), "text", "")
        cost = count_text(str(text)) + 40  # the item, an edit call and its result
        if current and used + cost > token_cap:
            out.append(current)
            current, used = [], 0
        current.append(item)
        used += cost
    out.append(current)
    return out


# --- analysing ----------------------------------------------------------------------------


def read_files(paths: Workspace) -> dict[str, str]:
    """The live memory files (``""`` for one that is missing or unreadable). Blocking."""
    from hippobot.lifecycle.dream_commit import read_file

    return {name: read_file(paths.memory_file(name), paths.root) for name in MEMORY_FILES}


def guide_text(guide: str, reverted: Sequence[str] = ()) -> str:
    """The guide, with the newest lines the user undid that Dream must not bring back."""
    if not reverted:
        return guide
    shown = list(reverted)[-_LEDGER_SHOWN:]
    return guide + (
        "\n\n## Lines the user undid\n"
        "The user reverted these lines from the memory files and no newer conversation "
        "states them again; do not add them back, nor a rewording of them:\n"
    ) + "\n".join(f"- {line.lstrip('-*+ ').strip()}" for line in shown)


def show_file(text: str) -> str:
    text = text.strip()
    if not text:
        return "(empty)"
    return text if len(text) <= _FILE_CAP else text[:_FILE_CAP] + "\n...[truncated]"


def _history(entries: Sequence[HistoryEntry]) -> str:
    return "\n".join(f"[#{e.cursor} {e.timestamp}] {e.content[:ENTRY_CAP]}" for e in entries)


def analysis_prompt(guide: str, files: Mapping[str, str], entries: Sequence[HistoryEntry]) -> str:
    return render(
        "dream_phase1.md", guide=guide, soul=show_file(files[SOUL_MD]),
        user=show_file(files[USER_MD]), memory=show_file(files[MEMORY_MD]),
        first=entries[0].cursor, last=entries[-1].cursor, history=_history(entries),
    )


async def analyse(model: DreamModel, guide: str, batch: Batch) -> Batch:
    """Phase 1: the findings and declined facts; asked once more when the answer is empty
    or follows no format (``batch.valid`` says whether the last answer did)."""
    prompt = analysis_prompt(guide, batch.files, batch.entries)
    for attempt in (1, 2):
        text = await model.ask(prompt)
        findings, batch.valid = parse_findings(text)
        if batch.valid:
            batch.findings += findings
            batch.rejections += parse_rejections(text)
            return batch
        if attempt == 1:
            log.warning("Dream analysis of entries %s was empty or followed no known format; "
                        "asking once more", batch.span)
    return batch


async def ask_missing(model: DreamModel, guide: str, batch: Batch, missing: Sequence[Outcome]) -> Batch:
    """One more request for facts the files do not state yet, each shown as the finding
    line that would keep it: the model keeps the line, moves it to another file, or
    declines the fact (``[SKIP] "<fact>" — reason``). Removals it adds are applied only to
    lines that still state a value one of these corrections replaces."""
    listed = "\n".join(_missing_line(o, batch.facts) for o in missing)
    prompt = render(
        "dream_missing.md", guide=guide, facts=listed, soul=show_file(batch.files[SOUL_MD]),
        user=show_file(batch.files[USER_MD]), memory=show_file(batch.files[MEMORY_MD]),
    )
    text = await model.ask(prompt)
    findings, _ = parse_findings(text)
    stale = [old for o in missing if o.status == "stale" and (old := old_value(o.fact, batch.facts))]
    findings = [f for f in findings if "-REMOVE]" not in f or any(_says(f, old) for old in stale)]
    batch.findings += [f for f in findings if f not in batch.findings]
    batch.rejections += parse_rejections(text)
    return apply(batch, findings)


def _missing_line(outcome: Outcome, facts: Sequence[Fact]) -> str:
    fact = outcome.fact
    tag = "USER" if fact.kind == "permanent" else "MEMORY"
    line = f"[{tag}] {as_memory_line(fact.claim)}"
    old = old_value(fact, facts)
    return f"{line}, not {old}" if outcome.status == "stale" and old else line


def _says(finding: str, old: str) -> bool:
    from hippobot.factmatch import states

    parsed = parse_finding(finding)
    return parsed is not None and states(parsed.text, old, loose=True)


# --- applying and accounting ----------------------------------------------------------------


def apply(batch: Batch, findings: Sequence[str] | None = None) -> Batch:
    """The code applies ``findings`` (default: all of the batch's) to its texts."""
    parsed = [f for f in (parse_finding(line) for line in (findings if findings is not None else batch.findings)) if f]
    placement = apply_findings(batch.files, _with_history_values(parsed, batch.facts))
    batch.files = placement.files
    batch.placed += placement.done
    for line in placement.skipped:
        log.debug("Dream: %s", line)
    return batch


def _with_history_values(findings: Sequence[Finding], facts: Sequence[Fact]) -> list[Finding]:
    """The findings as the history qualifies them: one that states only a fact a later
    correction of the batch supersedes is dropped (it would be written and replaced at
    once), and one that restates a correction without naming the old value gets the
    history's: the model said *what*, the history says *what it replaces*."""
    from dataclasses import replace

    from hippobot.factmatch import states

    superseded = [f for f in facts if superseded_by(f, facts) is not None]
    corrections = [(f, old_value(f, facts)) for f in facts if f.corrects]
    out = []
    for finding in findings:
        if finding.action == "add":
            if any(states(finding.text, f.claim) for f in superseded) and not any(
                states(finding.text, c.claim, loose=True) for c, _ in corrections
            ):
                log.info("Dream: leaving out %r, which a later correction replaces", finding.text)
                continue
            if not (finding.old or finding.replaces):
                for fact, old in corrections:
                    if old and states(finding.text, fact.claim, loose=True):
                        finding = replace(finding, old=old)
                        break
        out.append(finding)
    return out


def keep_grounded_edits(batch: Batch, edited: Mapping[str, str]) -> list[str]:
    """Take the model's ``edited`` files into ``batch`` with every line it invented (a
    template field filled with a made-up name) put back to what the file held; returns the
    lines undone. The findings count as said: the code places them anyway after the edits
    (dream_apply), so an edit that writes one in its own words changes nothing."""
    from hippobot.lifecycle.dream_grounding import keep_grounded

    findings = [f.text for f in map(parse_finding, batch.findings) if f is not None]
    kept = keep_grounded(batch.files, edited, [e.content for e in batch.entries] + findings)
    if kept.reverted:
        log.warning("Dream undid %d edited line(s) that neither the entries %s nor the findings say: %s",
                    len(kept.reverted), batch.span, "; ".join(kept.reverted))
    batch.files = kept.files
    return kept.reverted


def account(batch: Batch, do_not_readd: Sequence[str]) -> Batch:
    batch.outcomes = account_facts(
        batch.facts, batch.before, batch.files, rejections=batch.rejections, do_not_readd=do_not_readd
    )
    return batch


def keep_what_was_kept_for(batch: Batch) -> Batch:
    """Place each fact the model neither wrote nor declined, as the history states it:
    permanent facts in USER.md, the others in memory/MEMORY.md, a correction in place of
    the line it replaces."""
    findings = []
    for outcome in batch.missing:
        fact = outcome.fact
        file = USER_MD if fact.kind == "permanent" else MEMORY_MD
        old = old_value(fact, batch.facts)
        findings.append(Finding("add", file, as_memory_line(fact.claim), old=old, line=f"[history] {fact.text}"))
    if findings:
        placement = apply_findings(batch.files, findings)
        batch.files = placement.files
        batch.placed += [f"{line} (as the history states it)" for line in placement.done]
    return batch


def withhold_reverted(
    staged: Mapping[str, str],
    base: Mapping[str, str],
    ledger: Sequence[RevertedLine],
    entries: Sequence[HistoryEntry],
) -> tuple[dict[str, str], list[str]]:
    """``staged`` without the lines the user reverted that this run added again (unless an
    entry newer than the undo restates them), and those lines as ``file: line``."""
    from hippobot.memory.ledger import RevertLedger

    out, withheld = dict(staged), []
    for name, new in staged.items():
        before = set(content_lines(base.get(name, "")))
        drop = set()
        for line in content_lines(new):
            if line in before:
                continue
            hit = RevertLedger.matching(ledger, line)
            if hit is None or any(e.cursor > hit.after_cursor and restates(e.content, hit.text) for e in entries):
                continue
            drop.add(line)
            withheld.append(f"{name}: {line.strip()}")
            log.info("Dream re-added %r, which the user reverted; leaving it out", line)
        if drop:
            out[name] = "".join(
                ln for ln in new.splitlines(keepends=True) if ln.rstrip("\r\n").rstrip() not in drop
            )
    return out, withheld
