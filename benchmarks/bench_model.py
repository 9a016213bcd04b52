"""The benchmark's model: a :class:`ScriptedModel` that answers like a user's assistant, an
archivist and a Dream editor, behind a provider wrapper that times and inspects every call.

:class:`TimedProvider` wraps any provider (in-process :class:`ScriptedProvider`, or the real
OpenAI adapter talking HTTP to :class:`ScriptedServer`) and, for each request:

* times only the awaits *inside* the inner stream, so hippobot's own work between events
  (folding, callbacks) is not counted as model time;
* scripts what a fallback string cannot: a ``memory_search`` call on tool turns and an
  ``edit_file`` call in Dream's edit phase, queued just before the request reaches the model;
* reports token usage as the provider would (cl100k counts of the request);
* measures prompt-cache prefix reuse: the common prefix of this request's serialised tools and
  messages with the previous request's, divided by this request's length.

Everything the wrapper does besides the inner stream is harness time; it is added to
``excluded_s`` so that "agent overhead = wall time − excluded time" charges hippobot only for
its own work.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.workload import Workload
from hippobot.context import tokens
from hippobot.messages import content_text
from hippobot.providers.base import ChatRequest, Provider, StreamEvent
from hippobot.testing.archivist import archivist, is_archive_request
from hippobot.testing.scripted import RecordedRequest, ScriptedModel

__all__ = ["RequestRecord", "TimedProvider", "classify", "common_prefix", "make_model"]

_DREAM_ANALYSIS = "## Task: analysis"
_DREAM_EDIT = "## Task: apply the findings"
_ARCHIVED_FACT = re.compile(r"- \[(?:permanent|correction)\] ([^\n]+)")


def classify(messages: list[dict]) -> str:
    """What a request is for: turn, turn-tool (follow-up after a tool result), consolidation,
    dream-analysis or dream-edit."""
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    first = content_text(first_user.get("content")) if first_user else ""
    if _DREAM_ANALYSIS in first and len(messages) <= 2:
        return "dream-analysis"
    if _DREAM_EDIT in first and messages[0].get("role") == "user":
        return "dream-edit"
    last = messages[-1] if messages else {}
    if last.get("role") == "user":
        probe = RecordedRequest(messages, [], "", None, True, "openai")
        if is_archive_request(probe):
            return "consolidation"
    return "turn-tool" if last.get("role") == "tool" else "turn"


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search over C-level slice compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(slots=True)
class RequestRecord:
    kind: str
    turn: int
    prompt_tokens: int
    completion_tokens: int
    chars: int
    reuse: float | None  # None for the first request of a run
    model_s: float


@dataclass
class _Reply:
    """The answer of the fallback, chosen per request by the wrapper."""

    turn: int = 0


def make_model(workload: Workload, state: _Reply) -> ScriptedModel:
    """A scripted model whose fallback answers every kind of request hippobot sends."""
    model = ScriptedModel()

    def answer(request: RecordedRequest) -> str:
        kind = classify(request.messages)
        if kind == "consolidation" or is_archive_request(request):
            return archivist(request)
        if kind == "dream-analysis":
            facts = list(dict.fromkeys(_ARCHIVED_FACT.findall(request.last_user_text())))
            return "\n".join(f"[MEMORY] {f}" for f in facts[:5]) or "[SKIP] nothing new"
        if kind == "dream-edit":
            return "Applied the findings to memory/MEMORY.md."
        return workload.reply_text(state.turn)

    model.fallback = answer
    return model


@dataclass
class TimedProvider:
    """See the module docstring. ``turn`` must be set before each agent turn."""

    inner: Provider
    model: ScriptedModel
    workload: Workload
    workspace: Path
    state: _Reply = field(default_factory=_Reply)
    name: str = "bench"
    records: list[RequestRecord] = field(default_factory=list)
    excluded_s: float = 0.0  # model time + harness time since the last reset
    model_s: float = 0.0
    _previous: str | None = None

    @property
    def turn(self) -> int:
        return self.state.turn

    @turn.setter
    def turn(self, value: int) -> None:
        self.state.turn = value

    def reset_clock(self) -> None:
        self.excluded_s = 0.0
        self.model_s = 0.0

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        started = time.perf_counter()
        kind = classify(request.messages)
        reuse, chars = self._reuse(request)
        prompt = tokens.count_messages(request.messages) + tokens.count_tools(request.tools)
        completion = self._script(kind, request)
        self.model.usage(prompt_tokens=prompt, completion_tokens=completion)
        harness = time.perf_counter() - started
        inside = 0.0
        events = self.inner.stream(request).__aiter__()
        try:
            while True:
                t = time.perf_counter()
                try:
                    ev = await events.__anext__()
                except StopAsyncIteration:
                    inside += time.perf_counter() - t
                    break
                inside += time.perf_counter() - t
                yield ev
        finally:
            self.model.requests.clear()  # the record would keep every prompt alive
            self.records.append(
                RequestRecord(kind, self.turn, prompt, completion, chars, reuse, inside)
            )
            self.model_s += inside
            self.excluded_s += inside + harness

    def _reuse(self, request: ChatRequest) -> tuple[float | None, int]:
        text = json.dumps([request.tools, request.messages], ensure_ascii=False,
                          separators=(",", ":"))
        previous, self._previous = self._previous, text
        if previous is None or not text:
            return None, len(text)
        return common_prefix(previous, text) / len(text), len(text)

    def _script(self, kind: str, request: ChatRequest) -> int:
        """Queue tool calls the fallback cannot express; returns the completion tokens."""
        if kind == "turn" and self.workload.uses_tool(self.turn):
            self.model.reply_tool_call("memory_search", {"query": self.workload.search_query(self.turn)})
            return 20
        if kind == "dream-edit" and request.messages[-1].get("role") == "user":
            edit = self._memory_edit(request)
            if edit is not None:
                self.model.reply_tool_call("edit_file", edit)
                return 60
        if kind in ("turn", "turn-tool"):
            return tokens.count_text(self.workload.reply_text(self.turn))
        return 80

    def _memory_edit(self, request: ChatRequest) -> dict[str, str] | None:
        """One surgical edit of the staged MEMORY.md adding the first finding."""
        text = content_text(request.messages[-1].get("content"))
        found = re.search(r"^\[MEMORY\] (.+)$", text, re.MULTILINE)
        path = self.workspace / ".hippobot" / "dream" / "staged" / "memory" / "MEMORY.md"
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            return None
        lines = [line for line in current.splitlines() if line.strip()]
        if found is None or not lines:
            return None
        anchor = lines[-1] if current.count(lines[-1]) == 1 else current
        return {"path": "memory/MEMORY.md", "old_text": anchor,
                "new_text": f"{anchor}\n- {found.group(1).strip()}"}
