"""Reading nanobot v0.2.x session files so existing workspaces keep working.

nanobot stored a session as ``sessions/<key with ':' replaced by '_'>.jsonl`` whose first
line is ``{"_type": "metadata", "key", "created_at", "updated_at", "metadata",
"last_consolidated"}`` followed by one message per line (an optional
``{"_type": "provider_state"}`` line is ignored). The file name is lossy (``a:b_c`` and
``a_b:c`` share it), so the key is taken from the metadata line, never from the name.

The store migrates a legacy file the first time its key is loaded: it writes the canonical
file and renames the old one to ``<name>.jsonl.migrated``. Nothing here deletes user data.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from hippobot.session.model import ArchivedSummary, Session, SessionUsage, is_message

__all__ = ["LegacyIndex", "read_legacy", "retire_legacy"]

logger = logging.getLogger(__name__)

_FIRST_LINE_LIMIT = 1 << 20  # a metadata line longer than this is not a nanobot header


def _aware_iso(value: object) -> str | None:
    """nanobot wrote naive local times; give them the local UTC offset."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).astimezone().isoformat(timespec="milliseconds")
    except ValueError:
        return None


def _header_key(path: Path) -> str | None:
    """The key in a legacy file's metadata line, or ``None`` if it is not one."""
    try:
        with path.open("rb") as handle:
            line = handle.readline(_FIRST_LINE_LIMIT)
        record = json.loads(line)
    except (OSError, ValueError, RecursionError):
        return None
    if isinstance(record, dict) and record.get("_type") == "metadata":
        key = record.get("key")
        if isinstance(key, str) and key:
            return key
    return None


class LegacyIndex:
    """Key -> legacy file, from one scan of the top-level ``sessions/*.jsonl`` files.

    The scan is repeated only when the directory's modification time changes, so looking
    up a key that has no legacy file (every new session) costs one ``stat``.
    """

    def __init__(self, sessions_dir: Path) -> None:
        self._dir = sessions_dir
        self._stamp: int | None = None
        self._files: dict[str, Path] = {}

    def entries(self) -> dict[str, Path]:
        try:
            stamp = self._dir.stat().st_mtime_ns
        except OSError:
            self._stamp, self._files = None, {}
            return {}
        if stamp != self._stamp:
            self._files = self._scan()
            self._stamp = stamp
        return dict(self._files)

    def lookup(self, key: str) -> Path | None:
        return self.entries().get(key)

    def _scan(self) -> dict[str, Path]:
        found: dict[str, tuple[int, Path]] = {}
        for path in sorted(self._dir.glob("*.jsonl")):
            if not path.is_file() or path.is_symlink():
                continue
            key = _header_key(path)
            if key is None:
                continue
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                continue
            # Two files claiming one key: the one written last is the live one.
            if key not in found or mtime > found[key][0]:
                found[key] = (mtime, path)
        return {key: path for key, (_, path) in found.items()}


def _split_metadata(
    raw: object,
) -> tuple[dict[str, Any], ArchivedSummary | None, SessionUsage | None]:
    """nanobot kept the archived summary and usage inside metadata; lift them out."""
    metadata = dict(raw) if isinstance(raw, dict) else {}
    summary = None
    last = metadata.pop("_last_summary", None)
    if isinstance(last, dict) and isinstance(last.get("text"), str):
        active = last.get("last_active")
        summary = ArchivedSummary(last["text"], _aware_iso(active) or str(active or ""))
    usage = SessionUsage.from_dict(metadata.pop("_last_usage", None))
    return metadata, summary, usage


def read_legacy(path: Path, key: str) -> Session:
    """Parse a legacy file into a Session. Unreadable lines are skipped (the old file is kept)."""
    data = path.read_bytes()
    header: dict[str, Any] = {}
    messages = []
    skipped = 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            skipped += 1
            continue
        if isinstance(record, dict) and record.get("_type") == "metadata" and not header:
            header = record
        elif is_message(record):
            messages.append(record)
        elif not (isinstance(record, dict) and "_type" in record):
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d unreadable line(s) while migrating", path, skipped)
    metadata, summary, usage = _split_metadata(header.get("metadata"))
    created = _aware_iso(header.get("created_at")) or _mtime_iso(path)
    return Session(
        key=key,
        messages=messages,
        created_at=created,
        updated_at=_aware_iso(header.get("updated_at")) or created,
        last_consolidated=header.get("last_consolidated", 0),
        summary=summary,
        usage=usage,
        metadata=metadata,
    )


def _mtime_iso(path: Path) -> str:
    stamp = path.stat().st_mtime
    return datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="milliseconds")


def retire_legacy(path: Path) -> Path | None:
    """Rename a migrated legacy file to ``<name>.migrated`` (never over an existing file)."""
    target = path.with_name(path.name + ".migrated")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}.migrated.{counter}")
        counter += 1
    try:
        os.rename(path, target)
    except OSError as exc:
        logger.warning("could not rename migrated %s: %s", path, exc)
        return None
    return target
