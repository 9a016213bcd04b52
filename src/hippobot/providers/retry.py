"""Bounded retries with backoff, as a provider that wraps another provider.

The policy reads only exception types and fields (``retryable``, ``retry_after``,
``in_flight``), never message text. A stream that failed after yielding text or tool calls
is retried from scratch, and the consumer is told so by a
:class:`~hippobot.providers.base.Restart` event first; every retry is announced by a
:class:`~hippobot.providers.base.Retrying` event (attempt, wait, reason), so a front end can
say so instead of going silent.

``resend_in_flight=False`` (endpoints that work on one request at a time: a local model)
never sends a request again while the server may still be computing it (a timeout after
it was sent, a stream cut part-way): on such a server the copy would only queue behind the
abandoned original, doubling the wait, or, on servers that cancel the running request for
a new one, cancel it. Refused connections and error statuses are still retried.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from hippobot.errors import ProviderError
from hippobot.providers.base import (
    ChatRequest,
    Provider,
    Restart,
    Retrying,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
)

__all__ = ["RetryPolicy", "RetryingProvider"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before calling a failing endpoint again.

    ``max_attempts`` counts the first call. The wait before attempt ``n + 1`` is
    ``base_delay * 2**(n-1)`` capped at ``max_delay``, then spread by ``±jitter`` (a
    fraction) so that many clients do not retry in lockstep. A server's ``Retry-After``
    replaces the backoff; one longer than ``max_retry_after`` is not waited for at all:
    failing now with the server's message beats hanging for minutes.

    ``resend_in_flight``: whether an error raised while the server may still be working on
    the request (``ProviderError.in_flight``) is retried; off for endpoints that work on one
    request at a time.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    resend_in_flight: bool = True

    def delay(
        self, attempt: int, error: BaseException, *, rand: Callable[[], float] = random.random
    ) -> float | None:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), or None when
        the call must not be retried."""
        if attempt >= self.max_attempts:
            return None
        if not isinstance(error, ProviderError) or not error.retryable:
            return None
        if error.in_flight and not self.resend_in_flight:
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
    before a retry if and only if the failed attempt had already yielded text or tool calls;
    a :class:`Retrying` is yielded before every retry; the error raised after several
    attempts is the last one, its message ending with ``" (after N attempts)"``; one the
    policy did not re-send because the server may still be working on it says so.
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
                    if isinstance(event, TextDelta | ToolCallEvent):
                        yielded = True
                    yield event
                return
            except ProviderError as err:
                failure = err
            wait = self.policy.delay(attempt, failure)
            if wait is None:
                notes = []
                if attempt > 1:
                    notes.append(f"after {attempt} attempts")
                if failure.in_flight and failure.retryable and not self.policy.resend_in_flight:
                    notes.append("not sent again: the server may still be working on it")
                if notes:
                    failure.args = (f"{failure} ({'; '.join(notes)})", *failure.args[1:])
                raise failure
            if self._on_retry is not None:
                self._on_retry(attempt, failure, wait)
            attempt += 1
            if yielded:
                yield Restart(attempt, str(failure))
            yield Retrying(attempt, self.policy.max_attempts, wait, str(failure))
            await self._sleep(wait)

    async def aclose(self) -> None:
        """Close the wrapped provider's connections, if it holds any."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
