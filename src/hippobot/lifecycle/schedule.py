"""Loops of a long-running process (interactive agent, ``hippobot serve``).

- Dream every ``dream.intervalH`` hours, or at each time of ``dream.cron``; a run is skipped when
  nothing is pending, and never overlaps another (Dream's own cross-process lock).
- Dream as soon as pending facts would outgrow Recent History's share (``dream.auto``).
- Idle compaction: sessions silent for ``idleCompactAfterMinutes`` are archived.
- What waits to be archived (a ``/new`` a previous process did not finish, a consolidation
  that failed) is retried at start and every :data:`ARCHIVE_RETRY_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hippobot.config.schema import DreamConfig
    from hippobot.lifecycle.background import BackgroundJobs
    from hippobot.lifecycle.consolidator import Consolidator
    from hippobot.lifecycle.dream import Dream
    from hippobot.memory.store import MemoryStore
    from hippobot.session.manager import SessionManager

__all__ = ["Schedules", "next_dream_delay", "start_schedulers"]

log = logging.getLogger(__name__)

IDLE_SCAN_SECONDS = 60.0
ARCHIVE_RETRY_SECONDS = 300.0


def next_dream_delay(interval_h: float, cron: str | None, now: datetime) -> float:
    """Seconds until the next scheduled Dream."""
    if cron:
        from croniter import croniter

        nxt = croniter(cron, now).get_next(datetime)
        return max(1.0, (nxt - now).total_seconds())
    return max(60.0, interval_h * 3600.0)


@dataclass(frozen=True, slots=True)
class Schedules:
    """What the loops work with (built by the composition root)."""

    dream: Dream
    consolidator: Consolidator
    sessions: SessionManager
    memory: MemoryStore
    jobs: BackgroundJobs
    config: DreamConfig
    idle_minutes: float
    history_tokens: int  # the Recent History share of the budget (auto-Dream's trigger)


async def _dream_loop(s: Schedules, cron: str | None) -> None:
    while True:
        delay = next_dream_delay(s.config.interval_h, cron, datetime.now().astimezone())
        await asyncio.sleep(delay)
        if await asyncio.to_thread(s.memory.pending_count) == 0:
            continue
        try:
            result = await s.dream.run()
            (log.info if result.ok else log.warning)("scheduled Dream: %s", result.describe())
        except Exception:
            log.exception("scheduled Dream failed; the entries stay pending")


async def _auto_dream_loop(s: Schedules) -> None:
    """Dream as soon as pending facts would outgrow Recent History (lifecycle.autodream)."""
    from hippobot.lifecycle.autodream import SCAN_SECONDS, dream_if_due

    while True:
        try:
            result = await dream_if_due(s.memory, s.history_tokens, s.dream.run)
            if result is not None:
                log.info("Dream: %s", result.describe())
        except Exception:
            log.exception("Dream failed; the entries stay pending")
        await asyncio.sleep(SCAN_SECONDS)


async def _idle_loop(s: Schedules) -> None:
    while True:
        await asyncio.sleep(IDLE_SCAN_SECONDS)
        for info in await asyncio.to_thread(s.sessions.list):
            session = await s.sessions.aget(info.key)
            key = f"idle:{info.key}"
            if s.consolidator.idle_due(session) and not s.jobs.running(key):
                s.jobs.schedule(key, partial(s.consolidator.compact_idle, session))


async def _resume(s: Schedules) -> None:
    with contextlib.suppress(Exception):  # a Dream run killed after its commit point
        await asyncio.to_thread(s.dream.recover)
    while True:
        try:
            await s.consolidator.resume_pending()
        except Exception:
            log.exception("could not retry the archives waiting; the next turn retries")
        await asyncio.sleep(ARCHIVE_RETRY_SECONDS)


def start_schedulers(s: Schedules) -> list[asyncio.Task[None]]:
    """Start the loops on the running event loop (the caller checks a model is configured)."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_resume(s), name="resume-archives")]
    if s.config.enabled:
        cron = s.config.cron
        if cron:
            try:
                next_dream_delay(0, cron, datetime.now().astimezone())
            except Exception as exc:
                log.warning("dream.cron %r is not a valid cron expression (%s); using intervalH",
                            cron, exc)
                cron = None
        tasks.append(loop.create_task(_dream_loop(s, cron), name="dream-schedule"))
        if s.config.auto:
            tasks.append(loop.create_task(_auto_dream_loop(s), name="dream-auto"))
    if s.idle_minutes > 0:
        tasks.append(loop.create_task(_idle_loop(s), name="idle-compaction"))
    return tasks
