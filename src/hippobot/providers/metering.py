"""Every model request recorded where it happens: at the provider-call boundary.

:class:`MeteredProvider` wraps a provider and hands one :class:`UsageRecord` per request to a
narrow sink (anything with ``record(rec)``; the workspace's :class:`UsageLedger` in practice).
Which kind of job a request belongs to comes from :func:`usage_job`, a context variable the
lifecycle sets around its work (``with usage_job("dream"): ...``); a request made outside any
job is a ``turn``. Context variables follow asyncio tasks, so a background consolidation
started from a turn still records as ``consolidation`` once it has set its own job.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from typing import Protocol

from hippobot.errors import ProviderError
from hippobot.providers.base import (
    ChatRequest,
    Provider,
    Restart,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from hippobot.usage_ledger import UsageRecord

__all__ = ["MeteredProvider", "UsageSink", "current_job", "usage_job"]

_JOB: ContextVar[str] = ContextVar("hippobot_usage_job", default="turn")


class UsageSink(Protocol):
    def record(self, rec: UsageRecord) -> None: ...


def current_job() -> str:
    return _JOB.get()


@contextlib.contextmanager
def usage_job(kind: str) -> Iterator[None]:
    """Requests made inside this block are recorded as ``kind`` (``consolidation``, ``dream``)."""
    token = _JOB.set(kind)
    try:
        yield
    finally:
        _JOB.reset(token)


class MeteredProvider:
    """Records each request's reported usage (or its failure) to ``sink``, off the event loop."""

    def __init__(
        self,
        inner: Provider,
        sink: UsageSink,
        estimate: Callable[[ChatRequest], int] | None = None,
    ) -> None:
        self.inner = inner
        self.sink = sink
        self.name = inner.name
        # When the endpoint reports no usage (llama.cpp's server while streaming), the prompt is
        # counted by ``estimate`` and completion tokens as characters / 4; ``reported`` says so.
        self._estimate = estimate

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        job = current_job()
        usage: Usage | None = None
        produced = 0  # characters of text and tool calls, for the estimate

        def record(ok: bool) -> UsageRecord:
            if usage is None and ok and self._estimate is not None:
                prompt, completion = self._estimate(request), -(-produced // 4)
            else:
                prompt, completion = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
            return UsageRecord(
                job=job,
                provider=self.name,
                model=request.model,
                ok=ok,
                prompt_tokens=prompt,
                cached_tokens=usage.cached_tokens if usage else 0,
                completion_tokens=completion,
                reported=usage is not None,
            )

        try:
            async for ev in self.inner.stream(request):
                if isinstance(ev, Usage):
                    usage = ev
                elif isinstance(ev, TextDelta):
                    produced += len(ev.text)
                elif isinstance(ev, ToolCallEvent):
                    produced += len(ev.name) + len(ev.arguments)
                elif isinstance(ev, Restart):
                    produced = 0
                yield ev
        except ProviderError:
            await asyncio.to_thread(self.sink.record, record(False))
            raise
        except BaseException:
            # Not awaited: a failing or cancelled call must not wait for its ledger line.
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().run_in_executor(None, self.sink.record, record(False))
            raise
        await asyncio.to_thread(self.sink.record, record(True))

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
