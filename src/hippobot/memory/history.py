"""History entries: the records of ``memory/history.jsonl`` (SPEC 3.2), as pure data.

One entry is one JSON object on one line::

    {"cursor": 42, "timestamp": "2026-04-03 00:02", "content": "- User prefers dark mode",
     "session_key": "cli:direct", "source": {"session": "cli:direct", "from": 12, "to": 40}}

Invariants:

* ``cursor`` is a non-negative ``int`` (never a bool); cursors increase strictly in the file.
* ``timestamp`` is local time with minute precision, ``"YYYY-MM-DD HH:MM"``.
* ``session_key`` and ``source`` are optional; nanobot entries lack both and stay valid.
* :meth:`HistoryEntry.to_json` writes keys in the order above, ``ensure_ascii=False``,
  omitting ``None`` fields, so a line round-trips through :func:`parse_line` unchanged.

This module also holds the pure text helpers the store applies before writing
(:func:`strip_think`) and the splitter for nanobot's legacy ``HISTORY.md``
(:func:`split_legacy_history`). Nothing here touches the disk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

from hippobot.lazy_regex import lazy_compile
from hippobot.messages import scrubbed

__all__ = [
    "RAW_PREFIX",
    "TIMESTAMP_FORMAT",
    "HistoryEntry",
    "HistorySource",
    "ParsedChunk",
    "format_timestamp",
    "parse_chunk",
    "parse_line",
    "split_legacy_history",
    "strip_think",
]

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M"
RAW_PREFIX = "[RAW] "


def format_timestamp(moment: datetime) -> str:
    """``moment`` as a history timestamp (``YYYY-MM-DD HH:MM``, no timezone suffix)."""
    return moment.strftime(TIMESTAMP_FORMAT)


@dataclass(frozen=True, slots=True)
class HistorySource:
    """The message range ``[start, end)`` of session ``session`` that an entry summarises.

    Serialised as ``{"session": ..., "from": start, "to": end}``.
    """

    session: str
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "from": self.start, "to": self.end}

    @classmethod
    def from_dict(cls, data: object) -> HistorySource | None:
        """The source named by ``data``, or ``None`` when it is not a well-formed range."""
        if not isinstance(data, dict):
            return None
        session, start, end = data.get("session"), data.get("from"), data.get("to")
        if not isinstance(session, str) or not _is_index(start) or not _is_index(end):
            return None
        if end < start:
            return None
        return cls(session=session, start=start, end=end)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One archived summary (or ``[RAW]`` dump) in ``memory/history.jsonl``."""

    cursor: int
    timestamp: str
    content: str
    session_key: str | None = None
    source: HistorySource | None = None

    @property
    def is_raw(self) -> bool:
        """True for the degraded fallback: messages dumped because summarising failed."""
        return self.content.startswith(RAW_PREFIX)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "cursor": self.cursor,
            "timestamp": self.timestamp,
            "content": self.content,
        }
        if self.session_key is not None:
            data["session_key"] = self.session_key
        if self.source is not None:
            data["source"] = self.source.to_dict()
        return data

    def to_json(self) -> str:
        """The entry as one line of JSON, without the trailing newline."""
        return json.dumps(self.to_dict(), ensure_ascii=False)


MAX_CURSOR = 2**63 - 1  # the largest integer SQLite (the recall index) can hold


def _is_index(value: object) -> TypeGuard[int]:
    # bool is an int subclass; ``true`` is never a cursor or an index.
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_CURSOR


def parse_line(line: str) -> HistoryEntry | None:
    """Parse one line of ``history.jsonl``; ``None`` when it is not a valid entry.

    Rejected (as nanobot does): blank lines, text that is not JSON, JSON that is not an
    object, a missing/bool/negative/non-int ``cursor``, a non-string ``timestamp`` or
    ``content``, a ``session_key`` that is present but not a string. A malformed
    ``source`` does not reject the entry; it is dropped, because the summary itself is
    still good.
    """
    text = line.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None
    if not isinstance(data, dict):
        return None
    if "\\ud" in text.lower():  # a lone surrogate escape: no endpoint accepts one
        data = scrubbed(data)
    cursor = data.get("cursor")
    timestamp = data.get("timestamp")
    content = data.get("content")
    session_key = data.get("session_key")
    if not _is_index(cursor):
        return None
    if not isinstance(timestamp, str) or not isinstance(content, str):
        return None
    if session_key is not None and not isinstance(session_key, str):
        return None
    source = HistorySource.from_dict(data["source"]) if "source" in data else None
    return HistoryEntry(
        cursor=cursor,
        timestamp=timestamp,
        content=content,
        session_key=session_key,
        source=source,
    )


@dataclass(slots=True)
class ParsedChunk:
    """Result of :func:`parse_chunk`."""

    entries: list[HistoryEntry]
    consumed: int  # bytes of complete (newline-terminated) lines
    invalid: int  # complete, non-blank lines that are not valid entries
    tail: bytes  # bytes after the last newline: a line still being written, or torn


def parse_chunk(data: bytes) -> ParsedChunk:
    """Parse the complete lines of ``data``, a run of ``history.jsonl`` bytes.

    Lines are split on the newline byte, which never occurs inside a multibyte UTF-8
    sequence; invalid UTF-8 is replaced rather than fatal.
    """
    consumed = data.rfind(b"\n") + 1
    entries: list[HistoryEntry] = []
    invalid = 0
    for raw in data[:consumed].split(b"\n"):
        if not raw.strip():
            continue
        entry = parse_line(raw.decode("utf-8", errors="replace"))
        if entry is None:
            invalid += 1
        else:
            entries.append(entry)
    return ParsedChunk(entries, consumed, invalid, data[consumed:])


# --- reasoning leaks ------------------------------------------------------------------

_THINK_TAG = lazy_compile(r"<(/?)(?:think|thinking)>", re.IGNORECASE)
# Chat-template control tokens (``<|im_start|>assistant``, ``<|im_end|>``, ``<|eot_id|>``)
# that some servers leak into the text; the role word after a start token goes with it.
_TEMPLATE_TOKEN = lazy_compile(
    r"<\|(?:im_start|start_header_id)\|>(?:\w+(?:<\|end_header_id\|>)?)?|<\|[A-Za-z0-9_]+\|>"
)


def _remove_reasoning(text: str) -> str:
    # One linear pass over the tags; a regex with a lazy ``.*?`` per opening tag is
    # quadratic on text full of unclosed tags.
    kept: list[str] = []
    pos = 0
    inside = False
    for tag in _THINK_TAG.finditer(text):
        closing = bool(tag.group(1))
        if inside:
            if closing:
                inside, pos = False, tag.end()
        elif closing:
            kept, pos = [], tag.end()  # the reasoning came first, without an opening tag
        else:
            kept.append(text[pos : tag.start()])
            inside = True
    if not inside:
        kept.append(text[pos:])
    return "".join(kept)


def strip_think(text: str) -> str:
    """Remove model reasoning and chat-template tokens from ``text``.

    Closed ``<think>…</think>`` blocks go; an unclosed ``<think>`` hides everything after
    it; a stray ``</think>`` with no opening tag means the reasoning came first, so
    everything up to it goes. If only leaked scaffolding was there, the result is "".
    """
    cleaned = _remove_reasoning(text)
    cleaned = _TEMPLATE_TOKEN.sub("", cleaned)
    return text if cleaned == text else cleaned.strip()


# --- legacy HISTORY.md ----------------------------------------------------------------

_ENTRY_START = lazy_compile(r"^\[\d{4}-\d{2}-\d{2}")
_LEADING_TS = lazy_compile(r"^\[(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?\]\s?")
# A message line inside a ``[RAW]`` dump: ``[2026-01-01T09:58] USER [tools: a]: text``.
_RAW_MESSAGE_LINE = lazy_compile(
    r"^\[(?:\d{4}-\d{2}-\d{2}[^\]]*|\?)\]\s+[A-Z][A-Z_]*(?:\s+\[tools:[^\]]*\])?:"
)


def _is_raw_chunk(lines: list[str]) -> bool:
    first = _LEADING_TS.sub("", lines[0], count=1) if lines else ""
    return first.startswith("[RAW]")


def _legacy_chunks(text: str) -> list[list[str]]:
    chunks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            if current:
                chunks.append(current)
            current = []
            continue
        starts_entry = bool(_ENTRY_START.match(line))
        keeps_raw = _is_raw_chunk(current) and bool(_RAW_MESSAGE_LINE.match(line))
        if starts_entry and current and not keeps_raw:
            chunks.append(current)
            current = []
        current.append(line)
    if current:
        chunks.append(current)
    return chunks


def split_legacy_history(text: str, fallback_timestamp: str) -> list[HistoryEntry]:
    """Split nanobot's free-form ``HISTORY.md`` into entries with cursors ``1..n``.

    An entry starts after a blank line or at a line beginning ``[YYYY-MM-DD``; inside a
    ``[RAW]`` chunk the ``[ts] ROLE:`` message lines stay with it. A leading
    ``[YYYY-MM-DD HH:MM]`` (or ``THH:MM``, seconds allowed) becomes the entry's timestamp
    and is removed from the content; any other text keeps ``fallback_timestamp``.
    """
    entries: list[HistoryEntry] = []
    for lines in _legacy_chunks(text):
        chunk = "\n".join(lines).strip()
        if not chunk:
            continue
        timestamp = fallback_timestamp
        match = _LEADING_TS.match(chunk)
        if match:
            timestamp = f"{match.group(1)} {match.group(2)}"
            chunk = chunk[match.end() :].strip() or chunk
        entries.append(HistoryEntry(cursor=len(entries) + 1, timestamp=timestamp, content=chunk))
    return entries
