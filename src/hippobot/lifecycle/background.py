"""Background jobs that must never delay a reply, and never be dropped silently.

Jobs are keyed (one per key at a time: a second request for a running key joins it); errors are
logged, not raised into the turn that scheduled them. ``drain()`` lets a short-lived process
(``hippobot agent -m``) finish what it started before it exits. Their model requests are
background work (:func:`hippobot.providers.serial.background`): on an endpoint that takes one
request at a time, they wait for every chat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hippobot.providers.serial import background

__all__ = ["BackgroundJobs"]

log = logging.getLogger(__name__)


class BackgroundJobs:
    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[object]] = {}

    def running(self, key: str) -> bool:
        task = self._tasks.get(key)
        return task is not None and not task.done()

    def running_keys(self) -> list[str]:
        """The keys of the jobs still running."""
        return [key for key, task in self._tasks.items() if not task.done()]

    def schedule(self, key: str, job: Callable[[], Awaitable[object]]) -> asyncio.Task[object]:
        """Start ``job`` unless a job with this key is already running (then return that one)."""
        existing = self._tasks.get(key)
        if existing is not None and not existing.done():
            return existing

        async def guarded() -> object:
            try:
                with background():
                    return await job()
            except asyncio.CancelledError:
                raise
            except Exception:  # a background failure must not take the process down
                log.exception("background job %s failed", key)
                return None

        task = asyncio.get_running_loop().create_task(guarded(), name=key)
        self._tasks[key] = task
        task.add_done_callback(lambda t: self._tasks.pop(key, None) if self._tasks.get(key) is t else None)
        return task

    async def wait(self, key: str, timeout: float | None = None) -> None:
        task = self._tasks.get(key)
        if task is not None:
            await asyncio.wait({task}, timeout=timeout)

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for every running job (jobs scheduled while waiting are awaited too)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._tasks:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            if remaining == 0.0:
                break
            await asyncio.wait(set(self._tasks.values()), timeout=remaining)
            for key, task in list(self._tasks.items()):
                if task.done():
                    self._tasks.pop(key, None)
