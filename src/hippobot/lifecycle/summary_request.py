"""The archive request: asking the model to summarise messages ``[start, end)`` of a session.

The request normally shares the previous request's prefix (same system prompt, same replay,
same tools, ``tool_choice="none"``) with the instruction as the last user message, so the
provider's prompt cache serves it; after ``/new`` that is the request as it was before the
``/new``. When the slice is no longer in the replay (the window was capped), or a turn that
may still be running would be replayed with stand-ins for its results, the slice is sent as
a transcript instead, in chunks that fit, and the chunk summaries are merged.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hippobot.context import tokens
from hippobot.lifecycle.slices import TurnGuard
from hippobot.lifecycle.stated_facts import without_invented
from hippobot.lifecycle.summaries import (
    SAVE_SUMMARY_TOOL,
    ParsedSummary,
    format_transcript,
    parse_summary,
    summary_from_tool_call,
)
from hippobot.messages import content_text, public_text
from hippobot.prompts import render
from hippobot.providers.base import ChatRequest, collect
from hippobot.providers.metering import usage_job
from hippobot.session.model import Session

if TYPE_CHECKING:
    from hippobot.context.assembler import PromptAssembler
    from hippobot.context.budget import Budget
    from hippobot.providers.model import ModelClient

__all__ = ["SUMMARY_REPLY_TOKENS", "Summariser"]

SUMMARY_REPLY_TOKENS = 2048

Messages = list[dict[str, Any]]


def _as_before_new(session: Session) -> Session:
    """A view of ``session`` without its ``/new`` mark: the replay the last turn before the
    ``/new`` sent (same message objects, so their cached wire forms are reused)."""
    metadata = copy.deepcopy(session.metadata)
    metadata.pop("fresh_start", None)
    return replace(session, metadata=metadata)


class Summariser:
    """Builds and sends archive requests (collaborators: the prompt assembler, the model,
    the budget); raises :class:`~hippobot.errors.ProviderError` when the model fails."""

    def __init__(self, *, prompts: PromptAssembler, model: ModelClient, budget: Budget) -> None:
        self.prompts = prompts
        self.model = model
        self.budget = budget

    async def summarise(self, session: Session, start: int, end: int, guard: TurnGuard) -> ParsedSummary:
        # The replay would stand in for the missing results of a turn that may be running.
        running = guard.running_from(session.messages, end) is not None
        prefix = None if running else self._prefix_request(session, start, end)
        if prefix is not None:
            return await self._ask(prefix[0], prefix[1], tool_mode=False)
        return await self._transcript(session, start, end)

    def _prefix_request(self, session: Session, start: int, end: int) -> tuple[Messages, Messages] | None:
        """The previous request + an instruction, when the slice is its oldest replayed part."""
        view = session if session.fresh_start <= start else _as_before_new(session)
        prepared = self.prompts.prepare(view)
        messages, schemas = prepared.messages, prepared.schemas
        history = view.get_history(max_messages=0)  # identity of replayed stored messages
        replayed_ids = {id(m) for m in history}
        slice_msgs = [m for m in session.messages[start:end] if not m.get("_command")]
        if not slice_msgs or not all(id(m) in replayed_ids for m in slice_msgs):
            return None
        if len(messages) - 1 < len(history):  # the replay was capped by the token budget
            return None
        last = public_text(slice_msgs[-1]).strip().replace("\n", " ")
        if not last:
            last = f"a {slice_msgs[-1].get('role', 'tool')} message"
        instruction = render("consolidate.md", count=len(slice_msgs), last_excerpt=last[:60])
        request = [*messages, {"role": "user", "content": instruction}]
        # The request must fit the window with its own reply (at most SUMMARY_REPLY_TOKENS).
        budget = self.budget
        reply = min(SUMMARY_REPLY_TOKENS, self.model.max_tokens)
        limit = budget.input + max(0, budget.reply_reserve - reply)
        if budget.enabled and tokens.prompt_size(messages=request, tools=schemas).total > limit:
            return None
        return request, schemas

    async def _transcript(self, session: Session, start: int, end: int) -> ParsedSummary:
        budget = max(1000, self.budget.input // 2) if self.budget.enabled else 50_000
        parts: list[tuple[int, int]] = []
        part_start, used = start, 0
        for i in range(start, end):
            cost = tokens.count_message(session.messages[i])
            if used and used + cost > budget:
                parts.append((part_start, i))
                part_start, used = i, 0
            used += cost
        parts.append((part_start, end))
        lines: list[str] = []
        invented: list[str] = []
        nothing = True
        for n, (a, b) in enumerate(parts, 1):
            transcript = format_transcript(session.messages[a:b], max_chars=budget * 4)
            note = f"(Part {n} of {len(parts)} of a longer slice.)\n" if len(parts) > 1 else ""
            prompt = render(
                "consolidate_transcript.md", part_note=note, session_key=session.key,
                start=a, end=b - 1, transcript=transcript,
            )
            parsed = await self._ask([{"role": "user", "content": prompt}], [SAVE_SUMMARY_TOOL], tool_mode=True)
            if not parsed.ok:
                return parsed
            nothing = nothing and parsed.nothing
            lines.extend(line for line in parsed.lines if line not in lines)
            invented.extend(parsed.invented)
        return ParsedSummary(tuple(lines), nothing=nothing and not lines, invented=tuple(invented))

    async def _ask(self, messages: Messages, tools: Messages, *, tool_mode: bool) -> ParsedSummary:
        request = ChatRequest(
            model=self.model.name,
            messages=messages,
            tools=tools,
            tool_choice="auto" if tool_mode else "none",
            max_tokens=min(SUMMARY_REPLY_TOKENS, self.model.max_tokens),
            temperature=self.model.temperature,
        )
        with usage_job("consolidation"):
            response = await collect(self.model.provider.stream(request))
        for call in response.tool_calls:
            if call["function"]["name"] == "save_summary":
                parsed = summary_from_tool_call(call["function"]["arguments"])
                if parsed.ok:
                    break
        else:
            if response.finish_reason == "length":
                return ParsedSummary(())
            parsed = parse_summary(response.text)
        if not parsed.ok:
            return parsed
        return without_invented(parsed, _request_text(messages))


def _request_text(messages: Messages) -> str:
    """Everything the archive request showed the model: what a summary line may name."""
    parts: list[str] = []
    for message in messages:
        parts.append(content_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            arguments = call.get("function", {}).get("arguments", "")
            parts.append(arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))
    return "\n".join(parts)
