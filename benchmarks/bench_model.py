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
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.workload import Workload
from hippobot.context import tokens
from hippobot.messages import content_text
from hippobot.providers.base import ChatRequest, Provider, StreamEvent
from hippobot.testing.archivist import archivist, is_archive_request
from hippobot.testing.scripted import RecordedRequest, ScriptedModel

__all__ = ["ReplyState", "RequestRecord", "TimedProvider", "classify", "common_prefix", "make_model"]

_DREAM_ANALYSIS = "## Task: analysis"
_DREAM_EDIT = "## Task: apply the findings"
_DREAM_MISSING = "## Task: facts still missing"  # Dream's second look at unplaced facts
_ARCHIVED_FACT = re.compile(r"- \[(?:permanent|correction)\] ([^\n]+)")


def classify(messages: list[dict]) -> str:
    """What a request is for: turn, turn-tool (follow-up after a tool result), consolidation,
    dream-analysis (the analysis, and the second look at facts it left unplaced) or dream-edit."""
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    first = content_text(first_user.get("content")) if first_user else ""
    if (_DREAM_ANALYSIS in first or _DREAM_MISSING in first) and len(messages) <= 2:
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
    messages: int
    chars: int
    reuse: float | None  # None for the first request of a run
    extends_previous: bool  # the previous request is a prefix of this one (cache-perfect)
    reuse_recent: float | None  # best prefix share against any of the last 8 requests
    model_s: float


@dataclass
class ReplyState:
    """Which turn the model is answering (set by the runner before each turn)."""

    turn: int = 0


def make_model(workload: Workload, state: ReplyState) -> ScriptedModel:
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
    state: ReplyState = field(default_factory=ReplyState)
    name: str = "bench"
    records: list[RequestRecord] = field(default_factory=list)
    excluded_s: float = 0.0  # model time + harness time since the last reset
    excluded_cpu_s: float = 0.0  # the same in process CPU time
    model_s: float = 0.0
    _recent: deque[str] = field(default_factory=lambda: deque(maxlen=8))

    @property
    def turn(self) -> int:
        return self.state.turn

    @turn.setter
    def turn(self, value: int) -> None:
        self.state.turn = value

    def reset_clock(self) -> None:
        self.excluded_s = 0.0
        self.excluded_cpu_s = 0.0
        self.model_s = 0.0

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        started, started_cpu = time.perf_counter(), time.process_time()
        kind = classify(request.messages)
        reuse, extends, recent, chars = self._reuse(request)
        prompt = tokens.count_messages(request.messages) + tokens.count_tools(request.tools)
        completion = self._script(kind, request)
        self.model.usage(prompt_tokens=prompt, completion_tokens=completion)
        harness = time.perf_counter() - started
        harness_cpu = time.process_time() - started_cpu
        inside = inside_cpu = 0.0
        events = self.inner.stream(request).__aiter__()
        try:
            while True:
                t, c = time.perf_counter(), time.process_time()
                try:
                    ev = await events.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    inside += time.perf_counter() - t
                    inside_cpu += time.process_time() - c
                yield ev
        finally:
            self.model.requests.clear()  # the record would keep every prompt alive
            self.records.append(
                RequestRecord(kind, self.turn, prompt, completion, len(request.messages), chars,
                              reuse, extends, recent, inside)
            )
            self.model_s += inside
            self.excluded_s += inside + harness
            self.excluded_cpu_s += inside_cpu + harness_cpu

    def _reuse(self, request: ChatRequest) -> tuple[float | None, bool, float | None, int]:
        """Prefix share with the previous request; and with the best of the last few, since
        a provider's cache keeps several prefixes (a Dream run in between does not evict
        the conversation's)."""
        text = json.dumps([request.tools, request.messages], ensure_ascii=False,
                          separators=(",", ":"))
        recent = list(self._recent)
        self._recent.append(text)
        if not recent or not text:
            return None, False, None, len(text)
        previous = recent[-1]
        common = common_prefix(previous, text)
        best = common
        if common < 0.9 * len(text):  # only a drop needs the wider search
            best = max(common_prefix(p, text) for p in recent)
        # Everything but the closing "]]" of the previous request reappears unchanged.
        return common / len(text), common >= len(previous) - 2, best / len(text), len(text)

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
