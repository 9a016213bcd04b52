"""Loops of a long-running process (interactive agent, ``hippobot serve``).

- Dream every ``dream.intervalH`` hours, or at each time of ``dream.cron``; a run is skipped when
  nothing is pending, and never overlaps another (Dream's own cross-process lock).
- Dream as soon as pending facts would outgrow Recent History's share (``dream.auto``).
- Idle compaction: sessions silent for ``idleCompactAfterMinutes`` are archived.
- ``/new`` archives that a previous process did not finish are resumed at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent

__all__ = ["next_dream_delay", "start_schedulers"]

log = logging.getLogger(__name__)

IDLE_SCAN_SECONDS = 60.0


def next_dream_delay(interval_h: float, cron: str | None, now: datetime) -> float:
    """Seconds until the next scheduled Dream."""
    if cron:
        from croniter import croniter

        nxt = croniter(cron, now).get_next(datetime)
        return max(1.0, (nxt - now).total_seconds())
    return max(60.0, interval_h * 3600.0)


async def _dream_loop(agent: Agent) -> None:
    config = agent.settings.defaults.dream
    while True:
        delay = next_dream_delay(config.interval_h, config.cron, datetime.now().astimezone())
        await asyncio.sleep(delay)
        if agent.memory.pending_count() == 0:
            continue
        try:
            result = await agent.dream.run()
            (log.info if result.ok else log.warning)("scheduled Dream: %s", result.describe())
        except Exception:
            log.exception("scheduled Dream failed; the entries stay pending")


async def _auto_dream_loop(agent: Agent) -> None:
    """Dream as soon as pending facts would outgrow Recent History (lifecycle.autodream)."""
    from hippobot.lifecycle.autodream import SCAN_SECONDS, dream_if_due

    while True:
        try:
            result = await dream_if_due(agent.memory, agent.budget.history_tokens, agent.dream.run)
            if result is not None:
                log.info("Dream: %s", result.describe())
        except Exception:
            log.exception("Dream failed; the entries stay pending")
        await asyncio.sleep(SCAN_SECONDS)


async def _idle_loop(agent: Agent) -> None:
    while True:
        await asyncio.sleep(IDLE_SCAN_SECONDS)
        for info in agent.sessions.list():
            session = agent.sessions.get(info.key)
            if agent.consolidator.idle_due(session) and not agent.jobs.running(f"idle:{info.key}"):
                agent.jobs.schedule(f"idle:{info.key}", lambda s=session: agent.consolidator.compact_idle(s))


async def _resume(agent: Agent) -> None:
    try:
        await agent.consolidator.resume_pending()
    except Exception:
        log.exception("could not resume unfinished /new archives; the next turn retries")


def start_schedulers(agent: Agent) -> list[asyncio.Task[None]]:
    tasks: list[asyncio.Task[None]] = []
    if not agent.settings.model_configured():
        return tasks
    with contextlib.suppress(Exception):
        agent.dream.recover()
    tasks.append(asyncio.get_running_loop().create_task(_resume(agent), name="resume-archives"))
    if agent.settings.defaults.dream.enabled:
        if agent.settings.defaults.dream.cron:
            try:
                next_dream_delay(0, agent.settings.defaults.dream.cron, datetime.now().astimezone())
            except Exception as exc:
                log.warning("dream.cron %r is not a valid cron expression (%s); using intervalH",
                            agent.settings.defaults.dream.cron, exc)
                agent.settings.defaults.dream.cron = None
        tasks.append(asyncio.get_running_loop().create_task(_dream_loop(agent), name="dream-schedule"))
        if agent.settings.defaults.dream.auto:
            tasks.append(asyncio.get_running_loop().create_task(_auto_dream_loop(agent), name="dream-auto"))
    if agent.settings.defaults.idle_compact_after_minutes > 0:
        tasks.append(asyncio.get_running_loop().create_task(_idle_loop(agent), name="idle-compaction"))
    return tasks
