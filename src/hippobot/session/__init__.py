"""Sessions: conversations stored as append-only JSON Lines files (SPEC 3.1).

* :class:`Session` – pure data, with the history-replay rule :meth:`Session.get_history`.
* :class:`SessionStore` – the storage protocol; :class:`JsonlSessionStore` (files under
  ``<workspace>/sessions/``) and :class:`InMemorySessionStore` (tests).
* :class:`SessionManager` – one object per key, per-key turn locks, I/O off the loop.
* :func:`key_to_relpath` / :func:`relpath_to_key` – the reversible key <-> file mapping.

See ``docs/sessions.md`` for the file format and the crash/concurrency guarantees.
"""

from __future__ import annotations

from hippobot.session.keys import (
    MAX_KEY_LENGTH,
    key_to_relpath,
    relpath_to_key,
    validate_key,
)
from hippobot.session.manager import SessionManager
from hippobot.session.model import (
    SYNTHETIC_TOOL_RESULT,
    SYNTHETIC_TURN_START,
    ArchivedSummary,
    Session,
    now_iso,
)
from hippobot.session.store import (
    FORMAT_VERSION,
    InMemorySessionStore,
    JsonlSessionStore,
    SessionInfo,
    SessionStore,
)

__all__ = [
    "FORMAT_VERSION",
    "MAX_KEY_LENGTH",
    "SYNTHETIC_TOOL_RESULT",
    "SYNTHETIC_TURN_START",
    "ArchivedSummary",
    "InMemorySessionStore",
    "JsonlSessionStore",
    "Session",
    "SessionInfo",
    "SessionManager",
    "SessionStore",
    "key_to_relpath",
    "now_iso",
    "relpath_to_key",
    "validate_key",
]
