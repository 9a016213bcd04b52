"""When a failed archive is tried again, and when it becomes a ``[RAW]`` entry instead.

A consolidation whose summary fails (an error, a timeout, an answer in no known format)
writes nothing to ``history.jsonl`` and leaves the pointer where it was: its messages stay
pending, recorded in the session's meta record (:class:`~hippobot.session.model.ArchiveFailure`),
shown by ``status`` and ``memory history --pending``, and tried again by the next turn in the
session, the next start of ``hippobot agent`` or ``serve``, ``hippobot dream`` and the
schedule of a long-running process. A kill at any point leaves the same state, minus the
failure's reason (the attempt was not finished, so it does not count).

The bounded ``[RAW]`` dump is the last resort, written only

* when the messages would otherwise leave the prompt: the conversation no longer fits the
  input budget before a turn and its summary failed again (a broken model cannot wedge the
  session, and nothing is ever out of the prompt and out of the archive at once), or
* after :data:`GIVE_UP_ATTEMPTS` failed attempts, the first at least :data:`GIVE_UP_AFTER_S`
  before (a model that never manages this slice does not keep it waiting for ever).

Automatic retries wait :data:`RETRY_AFTER_S` after the first failure, twice as long after each
further one, at most :data:`RETRY_MAX_S` (the times are recorded, so every process agrees);
``hippobot dream``, ``/dream`` and ``/new`` try at once.
"""

from __future__ import annotations

from datetime import datetime

from hippobot.session.model import ArchiveFailure

__all__ = [
    "GIVE_UP_AFTER_S", "GIVE_UP_ATTEMPTS", "RETRY_AFTER_S", "RETRY_MAX_S", "failed", "gives_up",
    "retry_due",
]

RETRY_AFTER_S = 60.0
RETRY_MAX_S = 1800.0
GIVE_UP_ATTEMPTS = 3
GIVE_UP_AFTER_S = 3600.0


def _seconds_since(stamp: str, now: datetime) -> float | None:
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.astimezone()
    return (now - then).total_seconds()


def failed(
    previous: ArchiveFailure | None, *, end: int, reason: str, kind: str, now: datetime
) -> ArchiveFailure:
    """The record after one more failed attempt at archiving up to ``end``."""
    stamp = now.isoformat(timespec="seconds")
    if previous is None:
        return ArchiveFailure(end, reason, 1, stamp, stamp, kind)
    return ArchiveFailure(
        max(end, previous.end), reason, previous.attempts + 1,
        previous.first_failed or stamp, stamp, previous.kind if previous.kind == "new" else kind,
    )


def retry_due(failure: ArchiveFailure | None, now: datetime) -> bool:
    """Whether an automatic retry may go out now (a broken model is asked about once a
    minute at first, then ever less often: 1, 2, 4 ... 30 minutes after each failure)."""
    if failure is None:
        return True
    since = _seconds_since(failure.last_failed, now)
    pause = min(RETRY_MAX_S, RETRY_AFTER_S * 2 ** min(failure.attempts - 1, 16))
    return since is None or since >= pause or since < 0


def gives_up(failure: ArchiveFailure, now: datetime) -> bool:
    """Whether the slice has waited long enough to be stored as a ``[RAW]`` dump."""
    since = _seconds_since(failure.first_failed, now)
    return failure.attempts >= GIVE_UP_ATTEMPTS and (since is None or since >= GIVE_UP_AFTER_S)
