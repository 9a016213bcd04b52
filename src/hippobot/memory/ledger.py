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
(:func:`same_line`, :func:`restates`) are pure functions of their text.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from difflib import SequenceMatcher
from pathlib import Path

from hippobot.safeio import read_text

__all__ = [
    "LEDGER_PATH",
    "RevertLedger",
    "RevertedLine",
    "content_lines",
    "restates",
    "same_line",
]

log = logging.getLogger(__name__)

LEDGER_PATH = "memory/reverted.jsonl"
_SIMILAR = 0.85  # a rewording this close to a reverted line counts as the same line
_RESTATED = 0.6  # share of a line's words a later history entry must contain
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    ["the", "and", "for", "with", "that", "this", "are", "was", "has", "have", "had", "not", "but", "from", "into", "user", "users", "who", "will", "would", "their", "there", "they", "them", "his", "her", "its"]
)


@dataclass(frozen=True, slots=True)
class RevertedLine:
    file: str
    text: str
    reverted_at: str  # local time, "YYYY-MM-DD HH:MM"
    after_cursor: int  # history entries with a higher cursor came after the undo
    commit: str  # the undone commit

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def _normal(line: str) -> str:
    """A line without list markers, case and extra spaces (``- **Boat**: X`` ~ ``boat: x``)."""
    text = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)
    text = text.replace("**", "").replace("__", "").replace("`", "")
    return " ".join(text.lower().split())


def content_lines(text: str) -> list[str]:
    """The lines of a memory file that carry a fact: not blank, not a heading."""
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if len(_normal(stripped)) < 3 or stripped.startswith("#"):
            continue
        out.append(line.rstrip())
    return out


def same_line(a: str, b: str) -> bool:
    """True when ``b`` is ``a`` again, or a close rewording of it."""
    na, nb = _normal(a), _normal(b)
    if not na or not nb:
        return False
    return na == nb or SequenceMatcher(None, na, nb).ratio() >= _SIMILAR


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP}


def restates(entry: str, line: str) -> bool:
    """True when a history entry's text states the fact of ``line`` (most of its words)."""
    words = _words(line)
    if not words:
        return bool(_normal(line)) and _normal(line) in _normal(entry)
    said, text = _words(entry), entry.lower()
    # Scripts written without spaces (CJK) make long "words": look for those inside the text.
    found = [w for w in words if w in said or (not w.isascii() and w in text)]
    return len(found) >= _RESTATED * len(words)


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
