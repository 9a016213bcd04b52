"""What a Dream run reports: its result, and the batches it left pending and why."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from hippobot.atomic import atomic_write_text
from hippobot.errors import StorageError
from hippobot.lifecycle.accounting import Outcome, format_outcomes
from hippobot.lifecycle.versions import CHAT_HINTS, Hints
from hippobot.workspace import Workspace

__all__ = ["DreamResult", "EditStats", "HeldBatch", "read_pending_reasons", "write_pending_reasons"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeldBatch:
    """Entries a run left pending, and why."""

    first: int
    last: int
    reason: str
    facts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"from": self.first, "to": self.last, "reason": self.reason, "facts": list(self.facts)}


def read_pending_reasons(workspace: Path) -> list[HeldBatch]:
    """What the last Dream run left pending and why (``hippobot memory history --pending``)."""
    try:
        data = json.loads(Workspace(workspace).dream_pending.read_text(encoding="utf-8"))
        return [
            HeldBatch(int(h["from"]), int(h["to"]), str(h["reason"]), tuple(map(str, h.get("facts", ()))))
            for h in data.get("held", [])
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def write_pending_reasons(paths: Workspace, held: Sequence[HeldBatch]) -> None:
    """Record (or clear) why entries stay pending. Derived state: never fails a run."""
    try:
        if held:
            when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M")
            data = {"time": when, "held": [h.to_dict() for h in held]}
            atomic_write_text(paths.dream_pending, json.dumps(data, ensure_ascii=False))
        else:
            paths.dream_pending.unlink(missing_ok=True)
    except (OSError, StorageError) as exc:
        log.debug("could not record why entries stay pending: %s", exc)


@dataclass(slots=True)
class EditStats:
    """What the model's optional edit phase did: tool calls made, those that changed a file,
    and edits written as text blocks that applied."""

    calls: int = 0
    applied: int = 0
    text_edits: int = 0

    def add(self, other: EditStats) -> None:
        self.calls += other.calls
        self.applied += other.applied
        self.text_edits += other.text_edits


@dataclass(slots=True)
class DreamResult:
    status: Literal["nothing", "done", "dry-run", "failed", "busy", "stopped"]
    entries: int = 0
    batches: int = 0
    findings: list[str] = field(default_factory=list)
    files: tuple[str, ...] = ()
    commit: str | None = None
    error: str | None = None
    seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    held: list[HeldBatch] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)  # reverted lines Dream tried to re-add
    placed: list[str] = field(default_factory=list)  # what the code wrote for the findings
    edits: EditStats = field(default_factory=EditStats)  # the model's edit phase, if on
    ungrounded: list[str] = field(default_factory=list)  # edited lines undone: in neither the entries nor the findings

    def accounting(self) -> str:
        """One line per durable fact of the run, then what stays pending and why."""
        lines = [format_outcomes(self.outcomes)] if self.outcomes else []
        for h in self.held:
            lines.append(f"Entries #{h.first}-#{h.last} stay pending: {h.reason}")
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        """False when the run could not do its work (scripts get a non-zero exit)."""
        return self.status not in ("failed", "stopped", "busy")

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status, "entries": self.entries, "batches": self.batches,
            "findings": list(self.findings), "files": list(self.files), "commit": self.commit,
            "error": self.error, "seconds": round(self.seconds, 3), "withheld": list(self.withheld),
            "placed": list(self.placed), "ungrounded": list(self.ungrounded),
            "edit_calls": {"made": self.edits.calls, "applied": self.edits.applied, "text": self.edits.text_edits},
            "accounting": self.accounting(),
        }

    def describe(self, hints: Hints = CHAT_HINTS) -> str:
        text = self._headline(hints)
        extra = self.accounting() if self.status not in ("nothing", "busy", "dry-run") else ""
        return f"{text}\n{extra}" if extra else text

    def _headline(self, hints: Hints) -> str:
        took = f" in {self.seconds:.1f}s"
        if self.status == "nothing":
            return (
                "Nothing to dream about: no history entries are waiting. Entries are written "
                "when a conversation outgrows the context window, on /new, or after "
                "idleCompactAfterMinutes of silence (see `hippobot memory history`)."
            )
        if self.status == "busy":
            return "Dream is already running in another process; try again when it finishes."
        if self.status == "dry-run":
            body = "\n".join(self.findings) or "(no findings)"
            return f"Dry run over {self.entries} pending entr{'y' if self.entries == 1 else 'ies'}{took}; nothing was edited.\n{body}"
        if self.status in ("failed", "stopped"):
            done = f" ({self.batches} batch(es) completed before that)" if self.batches else ""
            return f"Dream {self.status}{took}: {self.error}. The remaining entries stay pending{done}."
        held = sum(h.last >= h.first for h in self.held)
        tail = f"; {held} batch(es) stay pending" if held else ""
        if not self.files:
            return f"Dream processed {self.entries} entr{'y' if self.entries == 1 else 'ies'}{took}; no memory changes{tail}."
        sha = f" (commit {self.commit[:8]})" if self.commit else ""
        undo = f" {hints.restore} {self.commit[:8]}" if self.commit else f" {hints.restore}"
        kept_out = f" Left out {len(self.withheld)} line(s) you had undone." if self.withheld else ""
        if self.ungrounded:
            kept_out += f" Undid {len(self.ungrounded)} edited line(s) the conversations did not say."
        return (
            f"Dream processed {self.entries} entr{'y' if self.entries == 1 else 'ies'}{took} and "
            f"updated {', '.join(self.files)}{sha}{tail}.{kept_out} See {hints.log}; undo with{undo}."
        )
