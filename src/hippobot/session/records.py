"""The session file format: records, their encoding, and a parser that never raises.

File ``sessions/<channel>/<chat>.jsonl`` (see :mod:`hippobot.session.keys`), UTF-8, one
JSON object per line:

* line 1, the header: ``{"_type": "session", "format": 1, "key": "cli:direct",
  "created_at": "2026-04-03T10:00:00.000+02:00"}``;
* message lines: the stored :class:`~hippobot.messages.Message` dicts, in order;
* meta records, appended whenever pointers change; the last one wins:
  ``{"_type": "meta", "last_consolidated": 12, "updated_at": "...", "summary":
  {"text": "...", "last_active": "..."} | null, "usage": {...} | null, "metadata": {...}}``.

Other ``_type`` values are reserved and ignored by this version. A line that is not a
JSON object, or an object that is neither a known record nor a message with a known
role, is *corrupt*: :func:`parse` reports it and the store quarantines it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from hippobot.errors import UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.messages import Message, public_text, scrubbed
from hippobot.session.model import (
    ArchivedSummary,
    Session,
    SessionUsage,
    is_message,
    normalise_offset,
)

__all__ = [
    "DEFAULT_META",
    "FORMAT_VERSION",
    "Parsed",
    "apply_meta",
    "as_datetime",
    "check_format",
    "decode",
    "encode",
    "later",
    "meta_record",
    "meta_state",
    "parse",
    "preview",
    "snapshot",
]

FORMAT_VERSION = 1
PREVIEW_CHARS = 120
# A JSON escape of a surrogate ("\ud800"); paired ones decode to one character, lone ones
# stay surrogates, which no endpoint accepts: :func:`decode` replaces those with U+FFFD.
_SURROGATE_ESCAPE = lazy_compile(rb"\\u[dD][89a-fA-F]")


def encode(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    # A lone surrogate can only sit inside a JSON string; "\udXXX" keeps it losslessly.
    return text.encode("utf-8", "backslashreplace") + b"\n"


def header_record(session: Session) -> dict[str, Any]:
    return {
        "_type": "session",
        "format": FORMAT_VERSION,
        "key": session.key,
        "created_at": session.created_at,
    }


def meta_state(session: Session) -> dict[str, Any]:
    """The persisted pointer fields, for change detection (``updated_at`` excluded)."""
    return copy.deepcopy(
        {
            "last_consolidated": session.last_consolidated,
            "summary": asdict(session.summary) if session.summary else None,
            "usage": session.usage.to_dict() if session.usage else None,
            "metadata": session.metadata,
        }
    )


DEFAULT_META = meta_state(Session(key=""))


def meta_record(session: Session) -> dict[str, Any]:
    state = meta_state(session)
    return {
        "_type": "meta",
        "last_consolidated": state.pop("last_consolidated"),
        "updated_at": session.updated_at,
        **state,
    }


def apply_meta(session: Session, record: dict[str, Any]) -> None:
    session.last_consolidated = normalise_offset(
        record.get("last_consolidated"), len(session.messages)
    )
    summary = record.get("summary")
    session.summary = None
    if isinstance(summary, dict) and isinstance(summary.get("text"), str):
        session.summary = ArchivedSummary(summary["text"], str(summary.get("last_active") or ""))
    session.usage = SessionUsage.from_dict(record.get("usage"))
    metadata = record.get("metadata")
    session.metadata = metadata if isinstance(metadata, dict) else {}


def snapshot(session: Session, *, with_meta: bool) -> bytes:
    """A whole file: header, every message, and a meta record when it carries anything."""
    parts = [encode(header_record(session))]
    parts.extend(encode(dict(m)) for m in session.messages)
    if with_meta or meta_state(session) != DEFAULT_META:
        parts.append(encode(meta_record(session)))
    return b"".join(parts)


@dataclass
class Parsed:
    header: dict[str, Any] | None = None
    messages: list[Message] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    last_time: str | None = None  # time of the newest timestamped record
    corrupt: list[bytes] = field(default_factory=list)


RecordKind = Literal["header", "message", "meta", "other", "corrupt"]


def decode(raw: bytes, *, first: bool) -> tuple[RecordKind, dict[str, Any] | None]:
    """What one non-blank line of a session file is, and its object; never raises.

    This is the one definition of the session line format: the store (:func:`parse`) and
    the recall index both classify lines with it, so they agree on which lines are
    messages and therefore on every message's number. ``first``: the file's first
    non-blank line (only there is a ``session`` record the header). ``other`` is a
    record of a ``_type`` this version ignores; ``corrupt`` is quarantined by the store.
    """
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return "corrupt", None
    if not isinstance(record, dict):
        return "corrupt", None
    if _SURROGATE_ESCAPE.search(raw):  # written by an older version: still loads and chats
        record = scrubbed(record)
    if "_type" not in record:
        return ("message", record) if is_message(record) else ("corrupt", None)
    if record["_type"] == "session" and first:
        return "header", record
    if record["_type"] == "meta":
        return "meta", record
    return "other", record


def parse(data: bytes, *, at_start: bool) -> Parsed:
    """Parse file bytes; never raises. ``at_start``: ``data`` begins at byte 0."""
    out = Parsed()
    first = at_start
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        is_first, first = first, False
        kind, record = decode(raw, first=is_first)
        if kind == "corrupt" or record is None:
            out.corrupt.append(raw)
        elif kind == "message":
            out.messages.append(record)  # type: ignore[arg-type]
            if isinstance(record.get("timestamp"), str):
                out.last_time = record["timestamp"]
        elif kind == "header":
            out.header = record
        elif kind == "meta":
            out.meta = record
            if isinstance(record.get("updated_at"), str):
                out.last_time = record["updated_at"]
    return out


def check_format(header: dict[str, Any] | None, path: Path) -> None:
    version = (header or {}).get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise UserError(
            f"{path}: session format {version} is newer than this hippobot reads "
            f"({FORMAT_VERSION}); upgrade hippobot"
        )


def as_datetime(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value).astimezone()
    except (ValueError, TypeError):
        return None


def later(current: str, other: str) -> str:
    mine, theirs = as_datetime(current), as_datetime(other)
    if mine is None or (theirs is not None and theirs > mine):
        return other
    return current


def preview(messages: Sequence[Message]) -> str:
    for message in messages:
        if message.get("role") == "user" and not message.get("_command"):
            text = re.sub(r"\s+", " ", public_text(message)).strip()
            if len(text) > PREVIEW_CHARS:
                text = text[: PREVIEW_CHARS - 1] + "…"
            return text
    return ""
