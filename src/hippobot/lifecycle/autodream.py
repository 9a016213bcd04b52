"""Dream on demand of the archive: when pending facts outgrow Recent History's share.

Recent History (context.recent) shows every durable fact Dream has not filed yet, within a
bounded share of the window. Before that share fills up, Dream must run, or the oldest
facts would drop out of the prompt. :func:`dream_due` says when; who runs it depends on the
process:

* a long-running process (interactive chat, ``hippobot serve``) checks every
  :data:`SCAN_SECONDS` and runs Dream in the background (:mod:`hippobot.lifecycle.schedule`);
* a one-shot ``hippobot agent -m`` or piped run starts a detached
  ``hippobot dream --background`` when it exits (:func:`spawn_background_dream`), so the
  user never waits for it; the check repeats at every start, so an interrupted run is
  picked up by the next one.

Dream's own cross-process lock keeps runs from overlapping.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from hippobot.context.tokens import count_text, estimate_text
from hippobot.memory.facts import fact_lines
from hippobot.memory.store import MemoryStore
from hippobot.workspace import Workspace

__all__ = ["DUE_SHARE", "SCAN_SECONDS", "dream_due", "dream_if_due", "spawn_background_dream"]

T = TypeVar("T")

log = logging.getLogger(__name__)

DUE_SHARE = 0.7
"""Dream is due when pending durable lines take this fraction of Recent History's share."""
SCAN_SECONDS = 30.0


def pending_durable_tokens(memory: MemoryStore, count: Callable[[str], int] = count_text) -> int:
    """Tokens the durable lines of every pending entry would take in Recent History
    (``count``: the tokenizer, or :func:`estimate_text`)."""
    total = 0
    for entry in memory.read_history(after=memory.dream_cursor()):
        for line in fact_lines(entry.content):
            if line.durable:
                total += count(line.render()) + 2
    return total


MAX_PENDING = 50
"""Dream is due when this many entries wait (Recent History shows at most 50 whole)."""


RETRY_AFTER_S = 1800.0
"""After a run that left entries pending, wait this long before starting another by itself
(the model could not account for them; asking again at once would only spend tokens)."""


def _recently_held(workspace: Path, now: float | None = None) -> bool:
    try:
        mtime = Workspace(workspace).dream_pending.stat().st_mtime
    except OSError:
        return False
    return (now if now is not None else time.time()) - mtime < RETRY_AFTER_S


def dream_due(memory: MemoryStore, history_tokens: int) -> str | None:
    """Why Dream should run now, or ``None`` (also while a recent run's held entries wait
    out :data:`RETRY_AFTER_S`)."""
    if _recently_held(memory.workspace):
        return None
    waiting = memory.pending_count()
    if waiting >= MAX_PENDING:
        return f"{waiting} history entries are waiting"
    # Far below the share even by a generous bound on the offline estimate (within ~15% of
    # the tokenizer): not due, and the tokenizer's tables (~0.3 s, ~30 MB) are not loaded
    # at the end of every one-shot run for it.
    if 1.5 * pending_durable_tokens(memory, estimate_text) + 64 < DUE_SHARE * history_tokens:
        return None
    used = pending_durable_tokens(memory)
    if used >= DUE_SHARE * history_tokens:
        return (
            f"pending archived facts take {used} of Recent History's {history_tokens} tokens"
        )
    return None


async def dream_if_due(
    memory: MemoryStore, history_tokens: int, run: Callable[[], Awaitable[T]]
) -> T | None:
    """``await run()`` (a Dream run) when :func:`dream_due`; else ``None``."""
    reason = dream_due(memory, history_tokens)
    if reason is None:
        return None
    log.info("starting Dream: %s", reason)
    return await run()


def spawn_background_dream(workspace: Path, log_path: Path | None = None) -> int | None:
    """Start ``hippobot dream --background`` detached from this process; its pid, or None.

    The child gets its own session (no terminal signals reach it), inherits the
    environment (so the same model settings apply) and writes its log next to Dream's
    state. A failure to start is logged, never raised: the next start tries again.
    """
    log_path = log_path or Workspace(workspace).dream_log
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hippobot", "dream", "--background", "--workspace", str(workspace)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                env=dict(os.environ),
            )
    except OSError as exc:
        log.warning("could not start Dream in the background (%s); run `hippobot dream`", exc)
        return None
    return proc.pid
