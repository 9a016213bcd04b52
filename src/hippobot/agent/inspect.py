"""Read-only views of what the agent sees: ``/status``, ``/context``, ``hippobot context``.

Both views count the prompt the same way (:func:`_measure`: the system prompt, the tool
schemas and the replayed history, counted offline), so ``/status`` and ``/context`` agree.
``/context`` also splits the system prompt into one row per source: each bootstrap file,
MEMORY.md, each skill and Recent History, like Claude Code's ``/context``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hippobot.context import tokens
from hippobot.context.budget import BudgetSplit
from hippobot.context.builder import SystemPrompt
from hippobot.messages import Message
from hippobot.workspace import BOOTSTRAP_FILES, MEMORY_MD

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent

__all__ = ["ContextReport", "StatusReport", "context_report", "status_report"]

_MEMORY_ROW = MEMORY_MD.rsplit("/", 1)[-1]  # "MEMORY.md", as the prompt heading names it


@dataclass(slots=True)
class SectionSize:
    name: str
    tokens: int
    share: float  # of the input budget (0 when the budget is off)


@dataclass(slots=True)
class SourceRow:
    """One source of the system prompt: a file, a skill, Recent History, a built-in part."""

    name: str
    kind: str  # "built-in" | "file" | "skill" | "history" | "summary"
    tokens: int
    note: str = ""  # e.g. "not sent: untouched template"


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
    sources: list[SourceRow] = field(default_factory=list)
    budget: BudgetSplit | None = None
    recalled: dict[str, Any] | None = None  # what recall added to the latest user message

    def to_json(self, *, full: bool = False) -> str:
        data = asdict(self)
        if not full:
            data.pop("messages")
        return json.dumps(data, ensure_ascii=False, indent=2)

    def to_text(self, *, full: bool = False) -> str:
        budget = self.input_budget
        w = max([28, *(len(r.name) + 2 for r in self.sources)])
        lines = [
            f"Context for session {self.session} (model {self.model or '-'})",
            f"{'':<{w}} {'tokens':>8} {'budget':>8}",
            f"{'system prompt':<{w}} {self.system_tokens:>8} {_pct(self.system_tokens, budget):>8}",
        ]
        for r in self.sources:
            note = f"   ({r.note})" if r.note else ""
            lines.append(f"{'  ' + r.name:<{w}} {r.tokens:>8} {_pct(r.tokens, budget):>8}{note}")
        lines += [
            f"{'tool schemas':<{w}} {self.tool_schema_tokens:>8} {_pct(self.tool_schema_tokens, budget):>8}"
            f"   ({len(self.tools)} tools: {', '.join(self.tools)})",
            f"{'history replay':<{w}} {self.history_tokens:>8} {_pct(self.history_tokens, budget):>8}"
            f"   ({self.history_messages} messages)",
            f"{'total':<{w}} {self.total_tokens:>8} {_pct(self.total_tokens, budget):>8}",
            f"input budget {budget} tokens = context window {self.context_window} − reply "
            "reserve − safety margin" if budget else "token budget: off (contextWindowTokens is 0)",
        ]
        if self.recalled is not None:
            lines += ["", *_recall_lines(self.recalled)]
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


def _recall_lines(marker: dict[str, Any]) -> list[str]:
    """What recall before answering added to the latest message, and why (score, citation);
    the text itself is in that message's runtime context (``--full`` prints it)."""
    hits = [h for h in marker.get("hits") or () if isinstance(h, dict)]
    mode, bar = marker.get("mode", "?"), marker.get("bar", 0)
    total = sum(int(h.get("tokens") or 0) for h in hits)
    head = (
        f"Memory recalled for the latest message: {len(hits)} hit(s), {total} tokens "
        f"({mode} search, relevance bar {bar}, {marker.get('seconds', 0)} s)"
    )
    lines = [head]
    lines += [f"  [{h.get('citation')}] relevance {h.get('score')}, {h.get('tokens')} tokens" for h in hits]
    for item in marker.get("left_out") or ():
        if isinstance(item, dict):
            lines.append(f"  left out [{item.get('citation')}]: {item.get('why')}")
    if marker.get("note"):
        lines.append(f"  note: {marker['note']}")
    return lines


def _latest_recall(messages: list[Message]) -> dict[str, Any] | None:
    for message in reversed(messages):
        if message.get("role") == "user":
            marker = message.get("_recall")
            return marker if isinstance(marker, dict) else None
    return None


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


@dataclass(slots=True)
class _Measured:
    system: SystemPrompt
    tools: list[str]
    history: list[Message]
    messages: list[dict[str, Any]]  # wire form: [system, *history]
    system_tokens: int
    schema_tokens: int
    history_tokens: int

    @property
    def total(self) -> int:
        return self.system_tokens + self.schema_tokens + self.history_tokens


def _measure(agent: Agent, key: str) -> _Measured:
    """The next request on ``key``, counted: the one estimate both views report."""
    request = agent.prompts.prepare(agent.sessions.get(key))  # exactly what a turn would send now
    size = request.parts()
    return _Measured(
        request.system, list(request.tools.names()), request.history, list(request.messages),
        size.system, size.tools, size.messages,
    )


def _sources(agent: Agent, system: SystemPrompt) -> list[SourceRow]:
    """The system prompt, one row per file / skill / part, in prompt order."""
    rows: list[SourceRow] = []
    sent = dict(agent.files.bootstrap())
    for section in system.sections:
        name, text = section.name, section.text
        if name == "bootstrap":
            rows += _bootstrap_rows(sent)
        elif name == "memory":
            rows.append(SourceRow(_MEMORY_ROW, "file", tokens.count_text(text)))
        elif name == "active_skills":
            for block in _blocks(text.split("\n\n", 1)[-1], "## "):
                title = block.split("\n", 1)[0].removeprefix("## ").strip()
                rows.append(SourceRow(f"skill {title}", "skill", tokens.count_text(block), "always on"))
        elif name == "skills":
            listed = [ln for ln in text.splitlines() if ln.startswith("- ")]
            intro = tokens.count_text(text) - sum(tokens.count_text(ln) for ln in listed)
            rows.append(SourceRow("skills index", "built-in", max(0, intro)))
            for line in listed:
                title = line[2:].split(" — ", 1)[0]
                rows.append(SourceRow(f"skill {title}", "skill", tokens.count_text(line), "listed"))
        elif name == "recent_history":
            count = sum(1 for ln in text.splitlines() if ln.startswith("- ["))
            rows.append(SourceRow("Recent History", "history", tokens.count_text(text), f"{count} entries"))
        elif name == "archived_summary":
            rows.append(SourceRow("archived summary", "summary", tokens.count_text(text)))
        else:
            rows.append(SourceRow(name.replace("_", " "), "built-in", tokens.count_text(text)))
    # Every memory file gets its row, sent or not, where it would appear.
    if system.section("bootstrap") is None:
        rows[1:1] = _bootstrap_rows(sent)
    if system.section("memory") is None:
        at = max(i for i, r in enumerate(rows) if r.kind == "file") + 1
        rows.insert(at, SourceRow(_MEMORY_ROW, "file", 0, "not sent: empty or untouched template"))
    return rows


def _bootstrap_rows(sent: dict[str, str]) -> list[SourceRow]:
    rows = []
    for name in BOOTSTRAP_FILES:
        if name in sent and sent[name].strip():
            rows.append(SourceRow(name, "file", tokens.count_text(f"## {name}\n\n{sent[name].strip()}")))
        else:
            rows.append(SourceRow(name, "file", 0, "not sent: empty or untouched template"))
    return rows


def _blocks(text: str, marker: str) -> list[str]:
    """``text`` cut before each line that starts with ``marker``."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(marker) or not out:
            out.append(line)
        else:
            out[-1] += line
    return [b.strip() for b in out if b.strip()]


def context_report(agent: Agent, key: str) -> ContextReport:
    measured = _measure(agent, key)
    system, history = measured.system, measured.history
    budget = agent.budget.input
    sizes = [(s.name, tokens.count_text(s.text)) for s in system.sections]
    sections = [SectionSize(name, n, n / budget if budget else 0.0) for name, n in sizes]
    system_tokens, schema_tokens = measured.system_tokens, measured.schema_tokens
    history_tokens = measured.history_tokens
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
        model=agent.model_label(),
        context_window=agent.budget.context_window,
        input_budget=budget,
        sections=sections,
        system_tokens=measured.system_tokens,
        tool_schema_tokens=measured.schema_tokens,
        tools=measured.tools,
        history_messages=len(history),
        history_tokens=measured.history_tokens,
        total_tokens=measured.total,
        messages=measured.messages,
        sources=_sources(agent, system),
        budget=split,
        recalled=_latest_recall(agent.sessions.get(key).messages),
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
    archive_waiting: int = 0  # messages that must reach the archive and have not yet
    archive_problem: str | None = None  # why (a failed consolidation, an unfinished /new)

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
        if self.archive_waiting:
            lines.append(f"Archive:    {self.archive_waiting} messages waiting to be archived: "
                         f"{self.archive_problem}")
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
    wait = session.archive_wait()
    return StatusReport(
        workspace=str(agent.workspace),
        model=model,
        provider=provider,
        session=key,
        messages=len(session.messages),
        # not archived: the live conversation, and what waits from before a /new
        unconsolidated=max(0, len(session.messages) - session.last_consolidated),
        estimate_tokens=_measure(agent, key).total,  # the same count /context shows
        input_budget=agent.budget.input,
        context_window=agent.budget.context_window,
        last_usage=session.usage.to_dict() if session.usage else None,
        history_entries_pending=agent.memory.pending_count(),
        dream_cursor=agent.memory.dream_cursor(),
        last_cursor=agent.memory.last_cursor(),
        versioning=agent.versioning_state(),
        archive_waiting=wait.count if wait else 0,
        archive_problem=wait.reason if wait else None,
    )
