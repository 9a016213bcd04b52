"""The ledger of reverted lines: what the user undid, so Dream does not bring it back.

``memory/reverted.jsonl`` holds one JSON object per line a restore took out of a memory
file::

    {"file": "USER.md", "text": "- Owns a boat called Marlin", "reverted_at": "2026-04-03 10:12",
     "after_cursor": 7, "commit": "<sha of the undone commit>"}

``after_cursor`` is the last history cursor allocated when the user undid the change: a
history entry with a higher cursor was written later, so it may state the fact again and
bring the line back. The file is appended to by restores and versioned with the memory
files, so undoing a restore also takes its lines out of the ledger again.

Invariants: reading is forgiving (a torn or foreign line is skipped); the matching rules
(:func:`same_line`, :func:`restates`) are those of the one fact matcher,
:mod:`hippobot.factmatch`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from hippobot.factmatch import covers, normalize_line, same_line
from hippobot.safeio import read_text
from hippobot.workspace import REVERTED

__all__ = [
    "LEDGER_PATH",
    "RevertLedger",
    "RevertedLine",
    "content_lines",
    "restates",
    "same_line",
]

log = logging.getLogger(__name__)

LEDGER_PATH = REVERTED  # the ledger, relative to the workspace
_RESTATED = 0.6  # share of a line's words a later history entry must contain


@dataclass(frozen=True, slots=True)
class RevertedLine:
    file: str
    text: str
    reverted_at: str  # local time, "YYYY-MM-DD HH:MM"
    after_cursor: int  # history entries with a higher cursor came after the undo
    commit: str  # the undone commit

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def content_lines(text: str) -> list[str]:
    """The lines of a memory file that carry a fact: not blank, not a heading."""
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if len(normalize_line(stripped)) < 3 or stripped.startswith("#"):
            continue
        out.append(line.rstrip())
    return out


def restates(entry: str, line: str) -> bool:
    """True when a history entry's text states the fact of ``line`` (most of its words)."""
    return covers(entry, line, share=_RESTATED)


def parse(text: str) -> list[RevertedLine]:
    out = []
    for raw in text.splitlines():
        try:
            data = json.loads(raw)
            out.append(
                RevertedLine(
                    file=str(data["file"]),
                    text=str(data["text"]),
                    reverted_at=str(data.get("reverted_at", "")),
                    after_cursor=int(data.get("after_cursor", 0)),
                    commit=str(data.get("commit", "")),
                )
            )
        except (ValueError, TypeError, KeyError):
            if raw.strip():
                log.debug("skipping an unreadable line of %s: %r", LEDGER_PATH, raw[:80])
    return out


def serialize(existing: bytes | None, lines: Iterable[RevertedLine]) -> bytes:
    """``existing`` ledger bytes with ``lines`` appended (a missing final newline added)."""
    head = existing or b""
    if head and not head.endswith(b"\n"):
        head += b"\n"
    return head + b"".join(line.to_json().encode("utf-8") + b"\n" for line in lines)


class RevertLedger:
    """Read access to ``<workspace>/memory/reverted.jsonl`` (restores write it, see gitstore)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.path = self.workspace / LEDGER_PATH

    def read(self) -> list[RevertedLine]:
        try:  # never through a link out of the workspace
            return parse(read_text(self.path, within=self.workspace))
        except OSError:
            return []

    @staticmethod
    def matching(entries: Sequence[RevertedLine], line: str) -> RevertedLine | None:
        """The newest ledger entry that ``line`` would bring back, if any."""
        return next((e for e in reversed(entries) if same_line(e.text, line)), None)
