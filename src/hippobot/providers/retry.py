"""Bounded retries with backoff, as a provider that wraps another provider.

The policy reads only exception types and fields (``retryable``, ``retry_after``), never
message text. A stream that failed after yielding events is retried from scratch, and the
consumer is told so by a :class:`~hippobot.providers.base.Restart` event first.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from hippobot.errors import ProviderError
from hippobot.providers.base import ChatRequest, Provider, Restart, StreamEvent

__all__ = ["RetryPolicy", "RetryingProvider"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before calling a failing endpoint again.

    ``max_attempts`` counts the first call. The wait before attempt ``n + 1`` is
    ``base_delay * 2**(n-1)`` capped at ``max_delay``, then spread by ``±jitter`` (a
    fraction) so that many clients do not retry in lockstep. A server's ``Retry-After``
    replaces the backoff; one longer than ``max_retry_after`` is not waited for at all:
    failing now with the server's message beats hanging for minutes.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.25
    max_retry_after: float = 60.0

    def delay(
        self, attempt: int, error: BaseException, *, rand: Callable[[], float] = random.random
    ) -> float | None:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), or None when
        the call must not be retried."""
        if attempt >= self.max_attempts:
            return None
        if not isinstance(error, ProviderError) or not error.retryable:
            return None
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                return None
            return max(0.0, error.retry_after)
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        spread = 1.0 + self.jitter * (2.0 * rand() - 1.0)
        return max(0.0, min(self.max_delay, backoff * spread))


class RetryingProvider:
    """A provider that retries ``inner`` according to ``policy``.

    Invariants: only :class:`ProviderError` is retried; a :class:`Restart` is yielded
    before a retry if and only if the failed attempt had already yielded events; the
    error raised after several attempts is the last one, its message ending with
    ``" (after N attempts)"``.
    """

    def __init__(
        self,
        inner: Provider,
        policy: RetryPolicy,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        on_retry: Callable[[int, ProviderError, float], None] | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self.name = inner.name
        self._sleep = sleep
        self._on_retry = on_retry

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        attempt = 1
        while True:
            yielded = False
            failure: ProviderError
            try:
                async for event in self.inner.stream(request):
                    yielded = True
                    yield event
                return
            except ProviderError as err:
                failure = err
            wait = self.policy.delay(attempt, failure)
            if wait is None:
                if attempt > 1:
                    failure.args = (f"{failure} (after {attempt} attempts)", *failure.args[1:])
                raise failure
            if self._on_retry is not None:
                self._on_retry(attempt, failure, wait)
            attempt += 1
            if yielded:
                yield Restart(attempt, str(failure))
            await self._sleep(wait)

    async def aclose(self) -> None:
        """Close the wrapped provider's connections, if it holds any."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
