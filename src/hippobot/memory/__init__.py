"""Memory files of a workspace: SOUL.md, USER.md, memory/MEMORY.md and the history archive.

:class:`MemoryStore` is the only thing that touches those files; :class:`HistoryEntry`
is one line of ``memory/history.jsonl``. See docs/memory-files.md.
"""

from __future__ import annotations

from hippobot.memory.history import (
    HistoryEntry,
    HistorySource,
    format_timestamp,
    parse_line,
    strip_think,
)
from hippobot.memory.store import (
    HISTORY_ENTRY_HARD_CAP,
    MemoryStore,
    atomic_write_bytes,
    atomic_write_text,
)
from hippobot.redact import REDACTED, redact_exact, redact_secrets

__all__ = [
    "HISTORY_ENTRY_HARD_CAP",
    "REDACTED",
    "HistoryEntry",
    "HistorySource",
    "MemoryStore",
    "atomic_write_bytes",
    "atomic_write_text",
    "format_timestamp",
    "parse_line",
    "redact_exact",
    "redact_secrets",
    "strip_think",
]
