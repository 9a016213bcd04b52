"""Read-only views of what the agent sees: ``/status``, ``/context``, ``hippobot context``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hippobot.context import tokens
from hippobot.context.budget import BudgetSplit

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent

__all__ = ["ContextReport", "StatusReport", "context_report", "status_report"]


@dataclass(slots=True)
class SectionSize:
    name: str
    tokens: int
    share: float  # of the input budget (0 when the budget is off)


@dataclass(slots=True)
class ContextReport:
    session: str
    model: str
    context_window: int
    input_budget: int
    sections: list[SectionSize]
    system_tokens: int
    tool_schema_tokens: int
    tools: list[str]
    history_messages: int
    history_tokens: int
    total_tokens: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    budget: BudgetSplit | None = None

    def to_json(self, *, full: bool = False) -> str:
        data = asdict(self)
        if not full:
            data.pop("messages")
        return json.dumps(data, ensure_ascii=False, indent=2)

    def to_text(self, *, full: bool = False) -> str:
        budget = self.input_budget
        lines = [
            f"Context for session {self.session} (model {self.model or '-'})",
            f"{'section':<20} {'tokens':>8} {'budget':>8}",
        ]
        for s in self.sections:
            lines.append(f"{s.name:<20} {s.tokens:>8} {_pct(s.tokens, budget):>8}")
        lines += [
            f"{'tool schemas':<20} {self.tool_schema_tokens:>8} {_pct(self.tool_schema_tokens, budget):>8}"
            f"   ({len(self.tools)} tools: {', '.join(self.tools)})",
            f"{'history replay':<20} {self.history_tokens:>8} {_pct(self.history_tokens, budget):>8}"
            f"   ({self.history_messages} messages)",
            f"{'total':<20} {self.total_tokens:>8} {_pct(self.total_tokens, budget):>8}",
            f"input budget {budget} tokens = context window {self.context_window} − reply "
            "reserve − safety margin" if budget else "token budget: off (contextWindowTokens is 0)",
        ]
        if self.budget is not None and budget:
            lines += ["", *_split_lines(self.budget)]
        if full:
            lines.append("")
            lines.append("Messages that would be sent:")
            for m in self.messages:
                lines.append(f"--- {m.get('role')} ---")
                content = m.get("content")
                lines.append(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
                if m.get("tool_calls"):
                    lines.append(json.dumps(m["tool_calls"], ensure_ascii=False))
        return "\n".join(lines)


def _split_lines(b: BudgetSplit) -> list[str]:
    w = b.context_window

    def row(name: str, n: int, note: str = "") -> str:
        return f"  {name:<18} {n:>8,} {_pct(n, w):>7}" + (f"   {note}" if note else "")

    return [
        f"How the {w:,}-token window is split:",
        row("fixed prompt", b.fixed, "identity, tool contract, skills list, tool schemas"),
        row("memory files", b.memory_files, "AGENTS.md, SOUL.md, USER.md, MEMORY.md as shown"),
        row("Recent History", b.recent_history, f"of a {b.recent_history_share:,}-token share"),
        row("conversation", b.conversation,
            f"of {b.conversation_room:,} room; archived from {b.trigger:,} down to {b.target:,} prompt tokens"),
        row("reply reserve", b.reply_reserve),
        row("safety margin", b.margin),
    ]


def _pct(n: int, budget: int) -> str:
    return f"{100 * n / budget:.1f}%" if budget else "-"


def context_report(agent: Agent, key: str) -> ContextReport:
    session = agent.sessions.get(key)
    request = agent.prompts.prepare(session)  # exactly what a turn would send now
    system, schemas, history = request.system, request.schemas, request.history
    registry = request.tools
    budget = agent.budget.input
    sizes = [(s.name, tokens.count_text(s.text)) for s in system.sections]
    sections = [SectionSize(name, n, n / budget if budget else 0.0) for name, n in sizes]
    system_tokens = tokens.count_text(system.text)
    schema_tokens = tokens.count_tools(schemas)
    history_tokens = tokens.count_messages(history)
    model = agent.model_label()
    split = None
    if agent.budget.enabled:
        by_name = dict(sizes)
        fixed = sum(by_name.get(n, 0) for n in ("identity", "tool_contract", "skills", "active_skills"))
        fixed += schema_tokens
        memory_files = by_name.get("bootstrap", 0) + by_name.get("memory", 0)
        overhead = system_tokens + schema_tokens
        b = agent.budget
        split = BudgetSplit(
            context_window=b.context_window, reply_reserve=b.reply_reserve, margin=b.margin,
            input=b.input, fixed=fixed, memory_files=memory_files,
            recent_history=by_name.get("recent_history", 0) + by_name.get("archived_summary", 0),
            recent_history_share=b.history_tokens, conversation=history_tokens,
            conversation_room=max(0, b.input - overhead),
            trigger=b.trigger_for(overhead), target=b.target_for(overhead),
        )
    return ContextReport(
        session=key,
        model=model,
        context_window=agent.budget.context_window,
        input_budget=budget,
        sections=sections,
        system_tokens=system_tokens,
        tool_schema_tokens=schema_tokens,
        tools=list(registry.names()),
        history_messages=len(history),
        history_tokens=history_tokens,
        total_tokens=system_tokens + schema_tokens + history_tokens,
        messages=list(request.messages),
        budget=split,
    )


@dataclass(slots=True)
class StatusReport:
    workspace: str
    model: str
    provider: str
    session: str
    messages: int
    unconsolidated: int
    estimate_tokens: int
    input_budget: int
    context_window: int
    last_usage: dict[str, int] | None
    history_entries_pending: int
    dream_cursor: int
    last_cursor: int
    versioning: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, indent=2)

    def to_text(self) -> str:
        usage = self.last_usage or {}
        cached = usage.get("cached_tokens", 0)
        prompt = usage.get("prompt_tokens", 0)
        lines = [
            f"Model:      {self.model or '(not configured)'}"
            + (f" via {self.provider}" if self.provider else ""),
            f"Workspace:  {self.workspace}",
            f"Session:    {self.session} — {self.messages} messages, {self.unconsolidated} not yet archived",
            f"Context:    ~{self.estimate_tokens} tokens of {self.input_budget} budget"
            + (f" ({100 * self.estimate_tokens / self.input_budget:.0f}%)" if self.input_budget else "")
            + f", window {self.context_window}",
        ]
        if prompt:
            lines.append(
                f"Last call:  {prompt} prompt tokens ({cached} cached), "
                f"{usage.get('completion_tokens', 0)} completion"
            )
        lines.append(
            f"Memory:     {self.history_entries_pending} history entries waiting for Dream "
            f"(cursor {self.dream_cursor}/{self.last_cursor})"
        )
        lines.append(f"Versions:   {self.versioning}")
        return "\n".join(lines)


def status_report(agent: Agent, key: str) -> StatusReport:
    session = agent.sessions.get(key)
    try:
        target = agent.llm.target
        model, provider = target.model, target.provider
    except Exception:
        model, provider = agent.llm.fallback_name, ""
    start = session.replay_start
    return StatusReport(
        workspace=str(agent.workspace),
        model=model,
        provider=provider,
        session=key,
        messages=len(session.messages),
        unconsolidated=max(0, len(session.messages) - start),
        estimate_tokens=agent.prompts.estimate(session),
        input_budget=agent.budget.input,
        context_window=agent.budget.context_window,
        last_usage=session.usage.to_dict() if session.usage else None,
        history_entries_pending=agent.memory.pending_count(),
        dream_cursor=agent.memory.dream_cursor(),
        last_cursor=agent.memory.last_cursor(),
        versioning=agent.versioning_state(),
    )
