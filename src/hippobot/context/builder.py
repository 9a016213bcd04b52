"""The system prompt: a pure function of files, memory, skills and history (SPEC 4.2).

Sections, in order, joined by ``"\\n\\n---\\n\\n"`` (empty ones are left out):

==================  ================================================================
``identity``        ``prompts/identity.md``: who hippobot is, paths, memory, guidelines
``bootstrap``       ``## AGENTS.md`` / ``## SOUL.md`` / ``## USER.md`` when customised
``tool_contract``   ``prompts/tool_contract.md``: how to use the tools safely
``memory``          ``# Memory`` with MEMORY.md, when it holds real facts
``active_skills``   ``# Active Skills``: full bodies of available always-on skills
``skills``          ``# Skills``: one line per other skill (name, description, path)
``recent_history``  ``# Recent History``: archive entries Dream has not processed yet
``archived_summary``  ``[Archived Context Summary]`` left by idle compaction
==================  ================================================================

For small context windows (``compact``, see :func:`hippobot.context.budget.compact_prompt`)
the identity and tool contract come from ``identity_compact.md`` and
``tool_contract_compact.md`` and the skills list is shorter: the same rules in fewer words.

Invariants:

* Deterministic: the same :class:`PromptInputs` give the same bytes. Nothing here reads the
  clock; per-turn data goes into the user message (:mod:`hippobot.context.runtime`) so the
  provider's prompt cache keeps hitting.
* Recent History shows what :func:`hippobot.context.recent.select_recent_history` chose
  (durable lines first, within its share of the budget); if it is still over the cap here,
  the oldest entries are dropped first, never the newest.
* Model-written text (history entries, the archived summary) is fenced so it cannot pose as
  a section or a runtime block.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hippobot.context.loader import WorkspaceFiles
from hippobot.context.memory_select import select_memory, split_budget
from hippobot.context.recent import render_entry
from hippobot.context.runtime import fence_untrusted
from hippobot.context.skills import Skill, SkillsIndex
from hippobot.context.tokens import count_text
from hippobot.prompts import render
from hippobot.workspace import AGENTS_MD, HISTORY, MEMORY_MD, SKILLS_DIR, SOUL_MD, USER_MD

__all__ = [
    "SECTION_SEPARATOR",
    "ContextBuilder",
    "HistoryLike",
    "PromptInputs",
    "PromptSection",
    "SystemPrompt",
    "build_system_prompt",
]

SECTION_SEPARATOR = "\n\n---\n\n"

# One line per channel family; unknown channels get no hint.
_CHAT_APPS = ("telegram", "discord", "slack", "whatsapp", "signal", "matrix", "feishu", "qq")
_FORMAT_HINTS = {
    "cli": "Replies are shown in a terminal that renders Markdown; avoid wide tables.",
    **{c: "Replies go to a chat app: short paragraphs, simple Markdown, no tables." for c in _CHAT_APPS},
    "sms": "Replies go by SMS: plain text, brief.",
    "email": "Replies go by email: plain paragraphs, no Markdown tables.",
}
_FORMAT_HINTS_COMPACT = {
    "cli": "The terminal renders Markdown; no wide tables.",
    **{c: "A chat app: short paragraphs, no tables." for c in _CHAT_APPS},
    "sms": "By SMS: plain text, brief.",
    "email": "By email: plain paragraphs, no tables.",
}
_SKILLS_INTRO = "Read a skill's file with read_file before following it."
_SKILLS_INTRO_COMPACT = "read one before using it"


class HistoryLike(Protocol):
    """An archive entry as the memory store yields it."""

    @property
    def cursor(self) -> int: ...
    @property
    def timestamp(self) -> str: ...
    @property
    def content(self) -> str: ...


@dataclass(frozen=True)
class PromptSection:
    name: str
    text: str


@dataclass(frozen=True)
class SystemPrompt:
    sections: tuple[PromptSection, ...]
    text: str

    def section(self, name: str) -> PromptSection | None:
        return next((s for s in self.sections if s.name == name), None)


@dataclass(frozen=True)
class PromptInputs:
    """Everything the system prompt depends on; nothing else is consulted."""

    workspace: Path
    project: Path | None
    bootstrap: Sequence[tuple[str, str]]  # (filename, text), already filtered
    memory: str | None
    skills: Sequence[Skill]
    recent_history: Sequence[HistoryLike]
    archived_summary: str | None
    tool_names: Sequence[str]
    channel: str
    model: str
    max_history_entries: int = 50
    max_history_tokens: int = 8000
    recent_history_note: str = ""  # e.g. how many archived facts did not fit (context.recent)
    compact: bool = False  # a small window: the shorter identity, tool contract and skills list


# --- sections ------------------------------------------------------------------------


def _shown(path: Path, inputs: PromptInputs) -> str:
    """Paths inside the workspace are relative when it is also the working directory."""
    if inputs.project is None:
        try:
            return path.relative_to(inputs.workspace).as_posix()
        except ValueError:
            pass
    return str(path)


def _history_hint(tool_names: Sequence[str], compact: bool = False) -> str:
    if "memory_search" in tool_names:
        return "memory_search finds what was said" if compact else (
            "search it with memory_search and open a hit with memory_get"
        )
    if "exec" in tool_names:
        return "grep it with exec" if compact else "search it with grep through exec"
    return "not shown here" if compact else "it is not shown in full here"


def _identity(inputs: PromptInputs) -> str:
    ws = inputs.workspace
    profile_root = inputs.project or ws
    hint = (_FORMAT_HINTS_COMPACT if inputs.compact else _FORMAT_HINTS).get(inputs.channel.lower())
    return render(
        "identity_compact.md" if inputs.compact else "identity.md",
        model_line=f" You are running on the model {inputs.model}." if inputs.model else "",
        work_dir=str(inputs.project or ws),
        agents=_shown(profile_root / AGENTS_MD, inputs),
        soul=_shown(profile_root / SOUL_MD, inputs),
        user=_shown(profile_root / USER_MD, inputs),
        memory_file=_shown(ws / MEMORY_MD, inputs),
        history_file=_shown(ws / HISTORY, inputs),
        history_hint=_history_hint(inputs.tool_names, inputs.compact),
        skills_dir=_shown(ws / SKILLS_DIR, inputs),
        format_hint=f"\n- {hint}" if hint else "",
    ).strip()


def _bootstrap(inputs: PromptInputs) -> str:
    return "\n\n".join(
        f"## {name}\n\n{text.strip()}" for name, text in inputs.bootstrap if text.strip()
    )


def _memory(inputs: PromptInputs) -> str:
    if not inputs.memory or not inputs.memory.strip():
        return ""
    # memory is model-written; its headings are legitimate, runtime envelopes are not
    return "# Memory\n\n## Long-term Memory\n" + fence_untrusted(
        inputs.memory.strip(), structure=False
    )


def _active_skills(inputs: PromptInputs) -> str:
    bodies = [
        f"## {s.name}\n\n{s.body.strip()}"
        for s in inputs.skills
        if s.always and s.available and s.invalid is None and s.body.strip()
    ]
    return "# Active Skills\n\n" + "\n\n".join(bodies) if bodies else ""


def _skill_line(skill: Skill, inputs: PromptInputs) -> str:
    path = _shown(skill.path, inputs)
    if skill.invalid is not None:
        return f"- {skill.name} — {path} (invalid: {skill.invalid})"
    line = f"- {skill.name} — {skill.description} — {path}"
    return line if skill.available else f"{line} (unavailable: {skill.reason})"


def _skills(inputs: PromptInputs) -> str:
    listed = [
        _skill_line(s, inputs)
        for s in inputs.skills
        if not (s.always and s.available and s.invalid is None)
    ]
    if not listed:
        return ""
    if inputs.compact:
        return f"# Skills ({_SKILLS_INTRO_COMPACT})\n" + "\n".join(listed)
    return f"# Skills\n\n{_SKILLS_INTRO}\n\n" + "\n".join(listed)


def _history_line(entry: HistoryLike) -> str:
    return render_entry(str(entry.timestamp), str(entry.content))


def _shorten_to(line: str, max_tokens: int) -> str:
    """Cut one history line to about ``max_tokens`` (only the newest entry ever needs it)."""
    note = " … (entry shortened)"
    while count_text(line) + count_text(note) > max_tokens and len(line) > 40:
        ratio = max_tokens / max(1, count_text(line) + count_text(note))
        line = line[: max(40, int(len(line) * ratio * 0.95))]
    return line + note


def _render_history(lines: Sequence[str], omitted: int, extra: str = "") -> str:
    note = f"({omitted} older entries omitted)\n\n" if omitted else ""
    if extra:
        note = f"{extra}\n\n{note}"
    return "# Recent History\n\n" + note + "\n".join(lines)


def _recent_history(inputs: PromptInputs) -> str:
    entries = list(inputs.recent_history)
    if not entries or inputs.max_history_entries <= 0:
        return ""
    cap = inputs.max_history_tokens
    kept = [_history_line(e) for e in entries[-inputs.max_history_entries :]]
    # cheap pass on per-line counts (cached), then confirm on the rendered text
    costs = [count_text(line) + 1 for line in kept]
    total = sum(costs) + 16  # header and the omitted note
    while len(kept) > 1 and total > cap:  # drop the oldest, never the newest
        total -= costs.pop(0)
        kept.pop(0)
    extra = inputs.recent_history_note
    text = _render_history(kept, len(entries) - len(kept), extra)
    while len(kept) > 1 and count_text(text) > cap:
        kept.pop(0)
        text = _render_history(kept, len(entries) - len(kept), extra)
    if count_text(text) > cap:  # the newest entry alone is too big: shorten it
        overhead = count_text(_render_history([""], len(entries) - 1, extra))
        kept[0] = _shorten_to(kept[0], max(16, cap - overhead))
        text = _render_history(kept, len(entries) - 1, extra)
    return text


def _archived_summary(inputs: PromptInputs) -> str:
    summary = (inputs.archived_summary or "").strip()
    if not summary:
        return ""
    return "[Archived Context Summary]\n\n" + fence_untrusted(summary)


_SECTIONS = (
    ("identity", _identity),
    ("bootstrap", _bootstrap),
    ("tool_contract", lambda inputs: render(
        "tool_contract_compact.md" if inputs.compact else "tool_contract.md"
    ).strip()),
    ("memory", _memory),
    ("active_skills", _active_skills),
    ("skills", _skills),
    ("recent_history", _recent_history),
    ("archived_summary", _archived_summary),
)


# --- the builder ---------------------------------------------------------------------


def _inputs_key(inputs: PromptInputs) -> tuple[Any, ...]:
    """A hashable key equal for inputs that render equally (skills are frozen dataclasses)."""
    return (
        inputs.workspace,
        inputs.project,
        tuple(tuple(pair) for pair in inputs.bootstrap),
        inputs.memory,
        tuple(inputs.skills),
        tuple((e.cursor, e.timestamp, e.content) for e in inputs.recent_history),
        inputs.archived_summary,
        tuple(inputs.tool_names),
        inputs.channel,
        inputs.model,
        inputs.max_history_entries,
        inputs.max_history_tokens,
        inputs.recent_history_note,
        inputs.compact,
    )


_memo: OrderedDict[tuple[Any, ...], SystemPrompt] = OrderedDict()
_memo_lock = threading.Lock()
_MEMO_SIZE = 16  # a few sessions alternating on one process


def build_system_prompt(inputs: PromptInputs) -> SystemPrompt:
    """Render the system prompt for ``inputs`` (memoised on the inputs' values)."""
    key = _inputs_key(inputs)
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
            return hit
    sections = []
    for name, render_section in _SECTIONS:
        text = render_section(inputs)
        if text.strip():
            sections.append(PromptSection(name, text))
    prompt = SystemPrompt(tuple(sections), SECTION_SEPARATOR.join(s.text for s in sections))
    with _memo_lock:
        _memo[key] = prompt
        if len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return prompt


@dataclass
class ContextBuilder:
    """Gathers the inputs from disk and builds the prompt; cheap when nothing changed.
    (The prompt pipeline, :class:`hippobot.context.assembler.PromptAssembler`, builds every
    system prompt through this.)

    Files and skills come through their stat-keyed caches, and the rendered prompt is
    memoised on the inputs, so an unchanged workspace costs a few ``stat`` calls per turn.
    """

    files: WorkspaceFiles
    skills: SkillsIndex
    max_history_entries: int = 50
    max_history_tokens: int = 8000
    memory_budget: int = 0
    """Tokens USER.md + MEMORY.md may take; past that they are selected by relevance to the
    anchor (0: shown as read, cut at ``bootstrapMaxChars``)."""
    compact: bool = False
    """The short identity, tool contract and skills list (:func:`~.budget.compact_prompt`)."""
    _fitted: OrderedDict[tuple[Any, ...], tuple[str | None, str | None]] = field(
        default_factory=OrderedDict, repr=False
    )

    def _fit_memory(
        self, bootstrap: list[tuple[str, str]], memory: str | None, anchor: str
    ) -> tuple[list[tuple[str, str]], str | None]:
        """USER.md and MEMORY.md within :attr:`memory_budget`, most relevant items first."""
        if self.memory_budget <= 0:
            return bootstrap, memory
        user = self.files.whole(USER_MD) if any(n == USER_MD for n, _ in bootstrap) else None
        whole_memory = self.files.whole(MEMORY_MD) if memory is not None else None
        key = (user, whole_memory, anchor, self.memory_budget)
        hit = self._fitted.get(key)
        if hit is None:
            sizes = [count_text(user or ""), count_text(whole_memory or "")]
            if sum(sizes) <= self.memory_budget:
                hit = (user, whole_memory)
            else:
                user_budget, memory_budget = split_budget(self.memory_budget, sizes)

                def fit(text: str | None, budget: int, label: str) -> str | None:
                    if text is None:
                        return None
                    return select_memory(
                        text, budget_tokens=budget, anchor=anchor, file_label=label,
                        count_tokens=count_text,
                    ).text

                hit = (fit(user, user_budget, USER_MD), fit(whole_memory, memory_budget, MEMORY_MD))
            self._fitted[key] = hit
            if len(self._fitted) > 32:
                self._fitted.popitem(last=False)
        new_user, new_memory = hit
        fitted = [(n, new_user if n == USER_MD and new_user is not None else t) for n, t in bootstrap]
        return fitted, new_memory

    def inputs(
        self,
        *,
        recent_history: Sequence[HistoryLike] = (),
        archived_summary: str | None = None,
        tool_names: Sequence[str] = (),
        channel: str = "cli",
        model: str = "",
        recent_history_note: str = "",
        memory_anchor: str = "",
    ) -> PromptInputs:
        bootstrap, memory = self._fit_memory(self.files.bootstrap(), self.files.memory(), memory_anchor)
        return PromptInputs(
            workspace=self.files.workspace,
            project=self.files.project,
            bootstrap=bootstrap,
            memory=memory,
            skills=self.skills.skills(),
            recent_history=recent_history,
            archived_summary=archived_summary,
            tool_names=tuple(tool_names),
            channel=channel,
            model=model,
            max_history_entries=self.max_history_entries,
            max_history_tokens=self.max_history_tokens,
            recent_history_note=recent_history_note,
            compact=self.compact,
        )

    def build(self, **kwargs: Any) -> SystemPrompt:
        """:func:`build_system_prompt` over :meth:`inputs` (same keyword arguments)."""
        return build_system_prompt(self.inputs(**kwargs))
