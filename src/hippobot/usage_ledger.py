"""The cost ledger: one JSON line per model request, summed per day and kind of job.

Background memory work (consolidation, Dream) spends tokens the user never sees in a reply;
the ledger makes it visible (``hippobot usage``, ``/usage``). It is written at the provider-call
boundary (:class:`hippobot.providers.metering.MeteredProvider`) from what the provider reports,
to ``<workspace>/.hippobot/usage.jsonl``. Format (version 1), one object per line::

    {"v": 1, "time": "2026-12-01T09:41:07+00:00", "day": "2026-12-01", "job": "turn",
     "provider": "llamacpp", "model": "qwen2.5-coder-1.5b", "ok": true,
     "prompt_tokens": 1830, "cached_tokens": 1790, "completion_tokens": 42, "reported": true}

``job`` is ``turn``, ``consolidation`` or ``dream``; ``ok`` is false for a request that failed
(no tokens are known for it); ``reported`` is false when the endpoint sent no usage: then
``prompt_tokens`` is hippobot's own count of the request and ``completion_tokens`` the
reply's characters / 4. ``day`` is
the local date. The file is append-only; deleting it only resets the counts. Lines that cannot
be read are skipped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from hippobot.workspace import Workspace

__all__ = ["JOBS", "LEDGER_FORMAT", "UsageLedger", "UsageRecord", "UsageRow", "UsageTotals", "format_table", "summarise"]

log = logging.getLogger(__name__)

LEDGER_FORMAT = 1
JOBS = ("turn", "consolidation", "dream")


@dataclass(frozen=True, slots=True)
class UsageRecord:
    job: str
    provider: str
    model: str
    ok: bool = True
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = True
    time: str = field(default_factory=lambda: datetime.now().astimezone().isoformat(timespec="seconds"))

    @property
    def day(self) -> str:
        return self.time[:10]

    def to_json(self) -> str:
        data = asdict(self)
        head = {"v": LEDGER_FORMAT, "time": data.pop("time"), "day": self.day}
        return json.dumps({**head, **data}, ensure_ascii=False)


@dataclass(slots=True)
class UsageTotals:
    """Request and token counts summed over some records (a day's job, a benchmark stage)."""

    requests: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    unreported: int = 0

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def add(self, rec: UsageRecord) -> None:
        self.requests += 1
        self.failed += 0 if rec.ok else 1
        self.unreported += 0 if (rec.reported or not rec.ok) else 1
        self.prompt_tokens += rec.prompt_tokens
        self.cached_tokens += rec.cached_tokens
        self.completion_tokens += rec.completion_tokens

    def merge(self, other: UsageTotals) -> None:
        for name in ("requests", "failed", "prompt_tokens", "cached_tokens", "completion_tokens", "unreported"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "uncached_tokens": self.uncached_tokens}


@dataclass(slots=True, kw_only=True)
class UsageRow(UsageTotals):
    """Totals of one (day, job)."""

    day: str
    job: str


class UsageLedger:
    """Appends records to a JSONL file and reads them back (blocking: call off the event loop)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def for_workspace(cls, workspace: Path) -> UsageLedger:
        return cls(Workspace(workspace).usage_ledger)

    def record(self, rec: UsageRecord) -> None:
        """Append one line (a single ``write`` on an ``O_APPEND`` file: processes don't interleave).

        A ledger that cannot be written never fails the model call it describes.
        """
        line = (rec.to_json() + "\n").encode("utf-8")
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
        except OSError as exc:
            log.warning("could not write the usage ledger %s: %s", self.path, exc)

    def read(self) -> Iterator[UsageRecord]:
        try:
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            rec = _parse(line)
            if rec is not None:
                yield rec


def _parse(line: str) -> UsageRecord | None:
    try:
        data = json.loads(line)
        return UsageRecord(
            job=str(data["job"]),
            provider=str(data.get("provider", "")),
            model=str(data.get("model", "")),
            ok=bool(data.get("ok", True)),
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            cached_tokens=int(data.get("cached_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            reported=bool(data.get("reported", True)),
            time=str(data["time"]),
        )
    except (ValueError, KeyError, TypeError):
        return None  # a torn last line (crash mid-write) or a foreign line


def summarise(records: Iterable[UsageRecord], *, days: int | None = None) -> list[UsageRow]:
    """Totals per (day, job), newest day first; ``days`` keeps only the last N days seen."""
    rows: dict[tuple[str, str], UsageRow] = {}
    for rec in records:
        row = rows.get((rec.day, rec.job))
        if row is None:
            row = rows[(rec.day, rec.job)] = UsageRow(day=rec.day, job=rec.job)
        row.add(rec)
    order = {job: n for n, job in enumerate(JOBS)}
    ordered = sorted(rows.values(), key=lambda r: (_neg(r.day), order.get(r.job, 99), r.job))
    if days is not None:
        keep = sorted({r.day for r in ordered}, reverse=True)[:days]
        ordered = [r for r in ordered if r.day in keep]
    return ordered


def _neg(day: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in day)


_COLUMNS = ("requests", "failed", "prompt_tokens", "cached_tokens", "uncached_tokens", "completion_tokens")
_HEADERS = ("requests", "failed", "prompt", "cached", "uncached", "completion")


def format_table(rows: list[UsageRow], *, path: Path | None = None) -> str:
    """The rows as a fixed-width table with a total line (what ``hippobot usage`` prints)."""
    if not rows:
        where = f" in {path}" if path else ""
        return f"No model requests recorded yet{where}."
    total = UsageRow(day="total", job="")
    for row in rows:
        total.merge(row)
    lines = [f"{'day':<10}  {'job':<13}" + "".join(f"  {h:>10}" for h in _HEADERS)]
    for row in [*rows, total]:
        values = row.to_dict()
        lines.append(f"{row.day:<10}  {row.job:<13}" + "".join(f"  {values[c]:>10}" for c in _COLUMNS))
    if total.unreported:
        lines.append(
            f"({total.unreported} request(s) came back without token counts from the endpoint; "
            "their tokens are hippobot's estimates.)"
        )
    return "\n".join(lines)
