"""Retries never make a second turn: the ledger of recent turns and how a retry finds one.

Clients retry on their own: the official SDKs twice by default, on a timeout, a 429 or a
5xx. hippobot tells them not to once a turn has started (``x-should-retry: false`` on
errors), but a retry may still arrive: from a client that ignores the header, or after
a timeout that left the first attempt running. Such a retry is answered from the first
attempt (joining it while it runs, or with its reply or error once it is over) instead
of storing the message again.

A request matches an earlier turn of the same user and session with the same message:

* with an ``Idempotency-Key``: the turn that had the same key (for ``TTL_S`` seconds);
* with ``x-stainless-retry-count`` above 0: the session's newest turn, if it had the same
  message (for ``TTL_S`` seconds);
* with ``x-stainless-retry-count: 0``: never (the client says it is a new request);
* saying neither: the session's newest turn, if it had the same message and began in the
  last ``WINDOW_S`` seconds.

Only the newest turn of a session is ever repeated: once the conversation has moved on, the
same words are a new turn.

The ledger keeps at most ``capacity`` turns, oldest dropped first, and of a finished turn only
what its answer needs (reply, usage, finish reason: not the tool results); it lives in memory
only, so a restarted server treats every request as new.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hippobot.server.identity import Attempt

if TYPE_CHECKING:
    from hippobot.agent.agent import TurnResult

__all__ = ["TTL_S", "WINDOW_S", "LedgerEntry", "TurnLedger", "fingerprint"]

TTL_S = 900.0  # longer than the SDKs' default 600 s timeout plus their back-off
WINDOW_S = 10.0


def fingerprint(text: str) -> str:
    """A message as a digest (the ledger keeps no message text)."""
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(slots=True)
class LedgerEntry:
    scope: str  # the user
    session: str
    task: asyncio.Future[TurnResult]  # the running turn, then a slim copy of its outcome
    fingerprint: str
    idempotency_key: str | None
    started: float
    framing: Any = None  # the first attempt's response framing (same id on a replay)


class IdempotencyConflict(ValueError):
    """An ``Idempotency-Key`` reused for a different message."""


class TurnLedger:
    """The recent turns a retry may refer to (see the module docstring)."""

    def __init__(self, capacity: int = 256, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self._clock = clock
        self._entries: OrderedDict[int, LedgerEntry] = OrderedDict()
        self._by_key: dict[tuple[str, str], LedgerEntry] = {}
        self._ids = 0

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, scope: str, session: str, text: str, attempt: Attempt) -> LedgerEntry | None:
        """The earlier turn this request repeats, or None for a new turn."""
        now, print_ = self._clock(), fingerprint(text)
        if attempt.idempotency_key is not None:
            entry = self._by_key.get((scope, attempt.idempotency_key))
            if entry is None or now - entry.started > TTL_S:
                return None
            if entry.fingerprint != print_:
                raise IdempotencyConflict(
                    "this Idempotency-Key was already used for a different message; "
                    "send a new key with each new message"
                )
            return entry
        if attempt.retry_count == 0:
            return None
        horizon = TTL_S if attempt.retry_count else WINDOW_S
        for entry in reversed(self._entries.values()):
            if now - entry.started > TTL_S:
                break
            if entry.scope == scope and entry.session == session:  # the session's newest turn
                same = entry.fingerprint == print_ and now - entry.started <= horizon
                return entry if same else None
        return None

    def add(
        self,
        scope: str,
        session: str,
        text: str,
        attempt: Attempt,
        task: asyncio.Future[TurnResult],
        framing: Any,
    ) -> LedgerEntry:
        entry = LedgerEntry(
            scope, session, task, fingerprint(text), attempt.idempotency_key, self._clock(), framing
        )
        self._ids += 1
        self._entries[self._ids] = entry
        task.add_done_callback(lambda done: _settle(entry, done))
        if attempt.idempotency_key is not None:
            self._by_key[(scope, attempt.idempotency_key)] = entry
        while len(self._entries) > self.capacity:
            _, old = self._entries.popitem(last=False)
            slot = (old.scope, old.idempotency_key or "")
            if self._by_key.get(slot) is old:
                del self._by_key[slot]
        return entry


def _settle(entry: LedgerEntry, done: asyncio.Future[TurnResult]) -> None:
    """Keep only what a replay needs of a finished turn."""
    from hippobot.agent.agent import TurnResult
    from hippobot.loop.runner import RunResult

    slim: asyncio.Future[TurnResult] = done.get_loop().create_future()
    if done.cancelled():
        slim.cancel()
    elif (exc := done.exception()) is not None:
        slim.set_exception(exc)
        slim.exception()  # retrieved: a replay may never come
    else:
        result = done.result()
        run = result.run
        if run is not None:
            run = RunResult(
                reply=run.reply, iterations=run.iterations, usage=run.usage,
                total_usage=run.total_usage, finish_reason=run.finish_reason,
            )
        slim.set_result(TurnResult(reply=result.reply, command=result.command, run=run,
                                   remembered=result.remembered))  # fmt: skip
    entry.task = slim
