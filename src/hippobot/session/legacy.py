"""Reading nanobot v0.2.x session files so existing workspaces keep working.

nanobot stored a session as ``sessions/<key with ':' replaced by '_'>.jsonl`` whose first
line is ``{"_type": "metadata", "key", "created_at", "updated_at", "metadata",
"last_consolidated"}`` followed by one message per line (an optional
``{"_type": "provider_state"}`` line is ignored). The file name is lossy (``a:b_c`` and
``a_b:c`` share it), so the key is taken from the metadata line, never from the name.

Reading never writes: loading a legacy session returns it as it is, and the canonical file
is created by the first write (a new turn, a meta update), which leaves nanobot's file where
and as it was, so nanobot keeps working on the same workspace. The session remembers which
file it came from (``metadata.migrated_from``: name, size, mtime); if nanobot's file changes
after hippobot took the session over, hippobot keeps its own copy and says so, once per
process, instead of silently ignoring the newer file.

Messages keep their content; nanobot's naive local timestamps become aware ISO times.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from hippobot.safeio import open_regular, read_regular
from hippobot.session.model import ArchivedSummary, Session, SessionUsage, is_message
from hippobot.workspace import SESSION_SUFFIX

__all__ = [
    "MIGRATED_FROM",
    "LegacyIndex",
    "header_key",
    "read_legacy",
    "source_stamp",
    "warn_if_shadowed",
]

MIGRATED_FROM = "migrated_from"
_warned: set[tuple[str, str]] = set()

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


def header_key(path: Path, *, within: Path) -> str | None:
    """The key in a legacy file's metadata line, or ``None`` if it is not one (or is a link
    out of ``within``)."""
    try:
        with open_regular(path, within=within) as handle:
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
        for path in sorted(self._dir.glob(f"*{SESSION_SUFFIX}")):
            if not path.is_file() or path.is_symlink():
                continue
            key = header_key(path, within=self._dir.parent)  # the workspace
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


def read_legacy(path: Path, key: str, *, within: Path) -> Session:
    """Parse a legacy file (inside ``within``) into a Session. Unreadable lines are skipped
    (the old file is kept)."""
    data = read_regular(path, within=within)
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
            stamp = _aware_iso(record.get("timestamp"))
            if stamp is not None:
                record["timestamp"] = stamp
            messages.append(record)
        elif not (isinstance(record, dict) and "_type" in record):
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d unreadable line(s) of a nanobot session", path, skipped)
    metadata, summary, usage = _split_metadata(header.get("metadata"))
    metadata[MIGRATED_FROM] = source_stamp(path)
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


def source_stamp(path: Path) -> dict[str, Any]:
    """What identifies this version of a legacy file: name, size and modification time."""
    stat = path.stat()
    return {"file": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def warn_if_shadowed(key: str, legacy: Path, metadata: dict[str, Any], canonical: Path) -> bool:
    """Warn (once per process and file) when nanobot's file for ``key`` is not the version
    hippobot took over; hippobot's own file stays the one it uses. Returns True if it warned."""
    recorded = metadata.get(MIGRATED_FROM)
    try:
        current = source_stamp(legacy)
    except OSError:
        return False
    if isinstance(recorded, dict) and all(recorded.get(k) == current[k] for k in ("size", "mtime_ns")):
        return False
    if (key, str(legacy)) in _warned:
        return True
    _warned.add((key, str(legacy)))
    logger.warning(
        "nanobot's file %s for session %r changed after hippobot took the session over; "
        "hippobot keeps using %s and ignores the newer file (move one of them aside to choose)",
        legacy, key, canonical,
    )
    return True
