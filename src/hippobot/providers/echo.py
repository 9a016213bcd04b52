"""Replies cleaned of the runtime-context block a model copied from its prompt.

hippobot appends a ``[Runtime Context — metadata only, not instructions]`` block (time,
channel, ...) to the user's message. Small local models often copy it into their answer
(seen with Qwen2.5-Coder-1.5B behind llama.cpp: "The cat is called Max.\n\n[Runtime
Context — ...]"). :class:`RuntimeEchoFilter` removes such a copy from the streamed text, from
the header to the footer ``[/Runtime Context]`` (or to the end of the reply when the model
stopped before it), so the user never sees it and later replays do not teach the model to
repeat it. Text that merely starts like the header is held only until it is clearly not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from hippobot.messages import RUNTIME_CONTEXT_FOOTER, RUNTIME_CONTEXT_HEADER
from hippobot.providers.base import ChatRequest, Provider, Restart, StreamEvent, TextDelta

__all__ = ["EchoGate", "RuntimeEchoFilter"]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a beginning of ``marker``."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


@dataclass(slots=True)
class EchoGate:
    """Streaming state: text in, text without the copied block out.

    Trailing blank space is held with a possible start of the header, so a removed block
    takes the blank lines around it along; text on both sides stays one line apart."""

    pending: str = ""
    inside: bool = False
    after_block: bool = False  # just left a block: leading newlines go, a separator may come
    emitted: bool = False

    def _emit(self, text: str, out: list[str]) -> None:
        if self.after_block:
            text = text.lstrip("\n")
            if not text:
                return
            if self.emitted:
                text = "\n" + text
            self.after_block = False
        if text:
            self.emitted = True
            out.append(text)

    def feed(self, text: str) -> str:
        self.pending += text
        out: list[str] = []
        while True:
            if self.inside:
                end = self.pending.find(RUNTIME_CONTEXT_FOOTER)
                if end < 0:  # keep only what could be the start of the footer
                    keep = _partial_suffix(self.pending, RUNTIME_CONTEXT_FOOTER)
                    self.pending = self.pending[len(self.pending) - keep :] if keep else ""
                    break
                self.pending = self.pending[end + len(RUNTIME_CONTEXT_FOOTER) :]
                self.inside, self.after_block = False, True
                continue
            start = self.pending.find(RUNTIME_CONTEXT_HEADER)
            if start >= 0:
                self._emit(self.pending[:start].rstrip(" \n"), out)
                self.pending = self.pending[start + len(RUNTIME_CONTEXT_HEADER) :]
                self.inside = True
                continue
            cut = len(self.pending) - _partial_suffix(self.pending, RUNTIME_CONTEXT_HEADER)
            while cut > 0 and self.pending[cut - 1] in " \n":
                cut -= 1
            self._emit(self.pending[:cut], out)
            self.pending = self.pending[cut:]
            break
        return "".join(out)

    def flush(self) -> str:
        """Text held only because it could start the header, released (another event or the
        end is coming); nothing while inside a copied block."""
        if self.inside:
            return ""
        out: list[str] = []
        self._emit(self.pending, out)
        self.pending = ""
        return "".join(out)


class RuntimeEchoFilter:
    """A provider whose streamed text never carries a copy of the runtime-context block."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        gate = EchoGate()
        async for ev in self.inner.stream(request):
            if isinstance(ev, TextDelta):
                text = gate.feed(ev.text)
                if text:
                    yield TextDelta(text)
                continue
            if isinstance(ev, Restart):
                gate = EchoGate()
            else:  # held text goes out before any other event, so the order stays as it was
                rest = gate.flush()
                if rest:
                    yield TextDelta(rest)
            yield ev

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
