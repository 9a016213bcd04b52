"""The tool loop: model ↔ tools until a final answer or the iteration cap.

The runner owns no storage: every message it produces goes through ``persist`` *before* it is
sent back to the model, so what is on disk is exactly what the model saw (this is what keeps
the next request a byte-identical extension of this one, and what makes a crash mid-turn
leave a replayable session).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hippobot.lazy_regex import lazy_compile
from hippobot.loop.events import (
    EventSink,
    ModelRetry,
    ModelWaiting,
    Notice,
    ReplyDelta,
    ReplyRestart,
    ToolFinished,
    ToolStarted,
)
from hippobot.messages import Message, ToolCall, wire_message
from hippobot.providers.base import (
    ChatRequest,
    Provider,
    Queued,
    Restart,
    Retrying,
    Started,
    StreamEvent,
    TextDelta,
    Usage,
    collect,
)
from hippobot.providers.text_tools import offered_tools, recover_tool_calls, written_value
from hippobot.tools.base import ToolResult

if TYPE_CHECKING:
    from hippobot.tools.base import ToolRegistry

__all__ = ["RunResult", "Runner", "truncate_tool_result"]

Persist = Callable[[Message], Awaitable[Message]]

_ITERATION_NOTE = (
    "I stopped after {n} tool steps without finishing (the limit is "
    "agents.defaults.maxToolIterations). Tell me to continue, or narrow the task."
)
_EMPTY_NOTE = "I completed the tool steps but could not produce a final answer. Please try again."
_NO_TEXT_NOTE = "The model gave an empty reply twice. Please try again, or rephrase the message."
# Sent after the tool steps when the model was asked to answer, and never stored: the local
# model repeats its call after a tool result "unless told to answer", and tool_choice "none"
# alone did not tell it (it ended empty, or wrote the call as text, in 3 of 4 runs' garden
# question, with the fact in a tool result).
_ANSWER_NOW: dict[str, Any] = {
    "role": "user",
    "content": "Now answer my message above in plain words, from what the tool results say. "
    "Do not call a tool.",
}
# The second ask after an empty reply with no tool steps. The same request again came back
# empty again (LoCoMo 1-5 with Qwen2.5-Coder-1.5B at temperature 0.1: 3 of 100 questions,
# in both hippobot's arm and BM25's): a last line, not stored, makes it another request.
# Tools stay offered: the model may still need to search.
_ANSWER_PLAINLY: dict[str, Any] = {"role": "user", "content": "Answer my message above in plain words."}


def _nudge(asked_again: bool, answer_only: bool, tool_calls: int) -> list[dict[str, Any]]:
    """The last line of a second ask (never stored), if any: after tool steps, answer from
    them; before any, answer in words (once the model goes to a tool, the line is moot)."""
    if answer_only:
        return [_ANSWER_NOW]
    return [_ANSWER_PLAINLY] if asked_again and tool_calls == 0 else []


def truncate_tool_result(text: str, limit: int) -> tuple[str, int | None]:
    """Keep the head and tail of an over-long tool result with a marker in between."""
    if len(text) <= limit:
        return text, None
    head = int(limit * 0.7)
    tail = limit - head
    omitted = len(text) - head - tail
    marker = f"\n[... {omitted} characters omitted: the full output was {len(text)} characters ...]\n"
    return text[:head] + marker + text[-tail:], len(text)


def _repeats(reply: str, tool_text: str) -> bool:
    """Whether ``reply`` is ``tool_text`` copied (whole, or its opening 120 characters)."""
    said, got = " ".join(reply.split()), " ".join(tool_text.split())
    if len(said) < 20 or len(got) < 20:
        return False
    return said.startswith(got[:120]) or got.startswith(said)


# A reply that only says it cannot answer. After tool steps whose results held the fact
# ("history#5 ... User's locker code at work is 4417"), the local model answered "I'm sorry,
# but I don't have enough information to provide the correct locker code at work." (3 of 6
# memory_eval answers in one run).
_DECLINES = lazy_compile(
    r"\b(?:(?:do not|don't|don’t) have (?:enough|sufficient|any|the) (?:information|context|details)"
    r"|(?:do not|don't|don’t) have (?:the ability|access) to"
    r"|(?:can't|cannot|can’t|am unable to|unable to) (?:help|assist|answer|provide|find|remember|recall|access)"
    r"|(?:do not|don't|don’t) know)\b",
    re.I,
)
_DECLINE_MAX_CHARS = 300


def _declines(reply: str) -> bool:
    """Whether ``reply`` is a short "I don't have enough information" and nothing more."""
    text = reply.strip()
    return 0 < len(text) <= _DECLINE_MAX_CHARS and _DECLINES.search(text) is not None


def _points_to_a_tool(reply: str, schemas: list[dict[str, Any]]) -> bool:
    """Whether ``reply`` is a short note that names one of the offered tools: "To get the
    full text of the memory entry about the garden, you can use the `memory_get` function
    with the citation provided." (the local model's whole answer after memory_search had
    returned the garden line, echoing the result's "Read more with memory_get")."""
    text = reply.strip()
    if not 0 < len(text) <= _DECLINE_MAX_CHARS:
        return False
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in offered_tools(schemas))


_SAYS_JSON = lazy_compile(r"\bjson\b", re.IGNORECASE)


def _answers_in_json(reply: str, messages: list[dict[str, Any]]) -> bool:
    """Whether ``reply`` is nothing but a small JSON object of plain values, unasked for:
    "What is my name?" was answered ```json {"name": "Maya"} ``` in 12 of 14 core runs with
    Qwen2.5-Coder-1.5B (its tool-call format, with the answer where a tool's name goes).
    A conversation that mentions JSON asked for it, and a larger or nested object is data."""
    value = written_value(reply)
    if not isinstance(value, dict) or not 0 < len(value) <= 3:
        return False
    if not all(isinstance(v, str | int | float | bool) for v in value.values()):
        return False
    # Asked for JSON anywhere (a client's system prompt, an earlier message), JSON is the
    # answer: "history.jsonl" in hippobot's own prompt is not the word.
    return not any(
        m.get("role") in ("system", "user")
        and isinstance(m.get("content"), str)
        and _SAYS_JSON.search(m["content"]) is not None
        for m in messages
    )


def _stand_in(note: str) -> Message:
    """The assistant message hippobot stores where the model gave no answer."""
    return {"role": "assistant", "content": note, "_stand_in": True}


def _writes_a_call(reply: str, schemas: list[dict[str, Any]]) -> bool:
    """Whether ``reply`` is nothing but tool calls written as text."""
    return bool(reply.strip()) and recover_tool_calls(reply, offered_tools(schemas)) is not None


def _call_summary(name: str, arguments: str, limit: int = 80) -> str:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return f"{name}(<invalid JSON arguments>)"
    if isinstance(args, dict):
        parts = []
        for k, v in args.items():
            s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            s = s.replace("\n", "⏎")
            parts.append(f"{k}={s[:40]}{'…' if len(s) > 40 else ''}")
        text = f"{name}({', '.join(parts)})"
    else:
        text = f"{name}(…)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class RunResult:
    reply: str
    iterations: int
    usage: Usage | None = None
    tool_calls: int = 0
    requests: int = 0
    stopped: str | None = None  # "max_iterations" when the cap was hit
    messages: list[Message] = field(default_factory=list)
    total_usage: Usage = field(default_factory=Usage)  # summed over every model call
    finish_reason: str = "stop"  # what the model reported for the final answer


@dataclass(slots=True)
class Runner:
    provider: Provider
    model: str
    tools: ToolRegistry | None
    max_iterations: int = 40
    max_tokens: int = 4096
    temperature: float | None = None
    max_tool_result_chars: int = 16_000
    stop: tuple[str, ...] = ()
    # An empty reply, or one that only repeats a tool's error, is asked for once more (a
    # chat needs an answer; Dream's edit phase, where "nothing to say" after the edits is an
    # answer, turns it off).
    ask_again_if_empty: bool = True
    # The prompt's size in tokens, for the progress a front end shows (None: not counted).
    prompt_size: Callable[[ChatRequest], int] | None = None

    async def run(
        self,
        messages: list[dict[str, Any]],
        persist: Persist,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """Run the loop on ``messages`` (wire format, system first); returns the final reply.

        ``messages`` is extended in place with every assistant/tool message, so the caller can
        inspect the exact final request. Provider errors propagate after whatever was already
        persisted stays persisted.
        """
        emit = on_event or (lambda _e: None)
        schemas = self.tools.schemas() if self.tools is not None else []
        result = RunResult(reply="", iterations=0)
        asked_again = False
        answer_only = False  # the request asked to answer with text, no more tool calls
        first_reply = ""  # a reply asked for again that still says something (JSON)
        last_error: str | None = None  # the latest tool result, when the call failed
        announced = ""  # what the model wrote beside its latest tool calls
        found = False  # the latest tool result succeeded and returned something
        for iteration in range(1, self.max_iterations + 1):
            result.iterations = iteration
            request = ChatRequest(
                model=self.model,
                messages=[*messages, *_nudge(asked_again, answer_only, result.tool_calls)],
                tools=schemas,
                tool_choice="none" if answer_only else "auto",
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                stop=self.stop,
            )
            size = self.prompt_size(request) if self.prompt_size is not None else 0
            emit(ModelWaiting(self.model, size))
            response = await collect(self.provider.stream(request), _forward(emit, self.model, size))
            result.requests += 1
            if response.usage is not None:
                result.usage = response.usage
                result.total_usage = _add(result.total_usage, response.usage)
            if not response.tool_calls:
                result.finish_reason = response.finish_reason
                reply = response.text
                if answer_only and _writes_a_call(reply, schemas):
                    # Told not to call, it wrote a call as text (never shown raw).
                    reply = ""
                parroted = last_error is not None and _repeats(reply, last_error)
                # "This will search for the locker code in your memory and return the
                # relevant information.", written beside its memory_search call, was the
                # local model's whole answer after the results: an announcement, not one.
                restated = bool(announced) and _repeats(reply, announced)
                # Told "I don't have enough information" after tool steps that all
                # succeeded: asked once to answer from what they returned.
                declined = found and _declines(reply)
                pointed = found and not declined and _points_to_a_tool(reply, schemas)
                in_json = not asked_again and _answers_in_json(reply, messages)
                if (
                    (parroted or restated or declined or pointed or in_json or not reply.strip())
                    and self.ask_again_if_empty
                    and not asked_again
                    and iteration < self.max_iterations
                ):
                    # A small local model sometimes ends its turn at once (5 of 100 LoCoMo
                    # questions with Qwen2.5-Coder-1.5B), or after its tool steps (asked for a
                    # locker code it had read), or answers with the error its last call got
                    # ("Error: not a citation: ..."): asked once more, with one line added
                    # at the end, it shares the prompt the server has just cached, so it
                    # costs a reply's time.
                    # After tool steps it is asked with tool_choice "none", and told so in
                    # a last message that is not stored (_ANSWER_NOW): asked the same again,
                    # the local model went on calling memory_get or ended empty a second
                    # time (2 of 6 memory_eval answers), with the fact in a result.
                    asked_again = True
                    answer_only = result.tool_calls > 0
                    first_reply = reply if in_json else ""
                    what = (
                        "repeated a tool's error" if parroted
                        else "repeated what it wrote beside its tool call" if restated
                        else "said it could not answer after its tool steps" if declined
                        else "told you to call a tool instead of answering" if pointed
                        else "was a JSON block, not words" if in_json
                        else "was empty"
                    )  # fmt: skip
                    how = "to answer from what its tools returned" if answer_only else "once more"
                    emit(Notice(f"the model's reply {what}; asking it {how}"))
                    continue
                if not reply.strip() and first_reply:
                    reply = first_reply  # asked for words, it said nothing: the JSON said something
                final: Message = {"role": "assistant", "content": reply}
                if not reply.strip():
                    reply = _EMPTY_NOTE if result.tool_calls else _NO_TEXT_NOTE
                    final = _stand_in(reply)
                stored = await persist(final)
                messages.append(wire_message(stored))
                result.messages.append(stored)
                result.reply = reply
                return result
            assistant: Message = {
                "role": "assistant",
                "content": response.text or None,
                "tool_calls": response.tool_calls,
            }
            announced = response.text
            stored = await persist(assistant)
            messages.append(wire_message(stored))
            result.messages.append(stored)
            for call in response.tool_calls:
                result.tool_calls += 1
                stored_result, outcome = await self._run_tool(call, persist, emit)
                messages.append(wire_message(stored_result))
                result.messages.append(stored_result)
                text = stored_result.get("content")
                last_error = text if outcome.is_error and isinstance(text, str) else None
                found = not (outcome.is_error or outcome.found_nothing) and bool(outcome.text.strip())
        note = _ITERATION_NOTE.format(n=self.max_iterations)
        emit(Notice(note, level="warning"))
        stored = await persist(_stand_in(note))
        messages.append(wire_message(stored))
        result.messages.append(stored)
        result.reply = note
        result.stopped = "max_iterations"
        return result

    async def _run_tool(self, call: ToolCall, persist: Persist, emit: EventSink) -> tuple[Message, ToolResult]:
        """The stored tool message, and what the call returned (whether it failed, whether it
        found anything)."""
        name = call["function"]["name"]
        arguments = call["function"]["arguments"]
        summary = _call_summary(name, arguments)
        emit(ToolStarted(name, summary))
        if self.tools is None:
            outcome = ToolResult(f"Error: no tools are available; {name!r} cannot be called.", is_error=True)
        else:
            outcome = await self.tools.execute(name, arguments)
        ok = not outcome.is_error
        text, original = truncate_tool_result(outcome.text, self.max_tool_result_chars)
        emit(ToolFinished(name, ok, summary))
        msg: Message = {"role": "tool", "tool_call_id": call["id"], "name": name, "content": text}
        if original is not None:
            msg["_truncated"] = original
        return await persist(msg), outcome


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens,
        a.cached_tokens + b.cached_tokens,
    )


def _forward(emit: EventSink, model: str, size: int) -> Callable[[StreamEvent], None]:
    def on_event(ev: StreamEvent) -> None:
        if isinstance(ev, TextDelta):
            emit(ReplyDelta(ev.text))
        elif isinstance(ev, Restart):
            emit(ReplyRestart(ev.error))
        elif isinstance(ev, Queued):
            emit(ModelWaiting(model, size, behind=ev.behind))
        elif isinstance(ev, Started):
            emit(ModelWaiting(model, size))
        elif isinstance(ev, Retrying):
            emit(ModelRetry(ev.attempt, ev.attempts, ev.wait, ev.reason))

    return on_event
