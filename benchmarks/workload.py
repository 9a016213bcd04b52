"""The benchmark's conversation: deterministic texts, workspaces, and pre-generated sessions.

Every text comes from a seeded generator, so two runs (and two machines) replay the same
conversation. A turn is one user message (about 60 to 600 characters, sometimes carrying a
``FACT:`` the scripted archivist picks up) and one assistant reply (about 200 to 1,500
characters): roughly 300 cl100k tokens a turn, so a 128k window holds a few hundred turns.

:func:`pregenerate` writes what a session of ``n`` turns looks like on disk after a real
life: the session file in format 1 (header, messages with their runtime-context markers,
one meta record), the history entries its consolidations would have written, and the Dream
cursor past them. The consolidation points are replayed with hippobot's own token counter
and budget arithmetic, so the unconsolidated tail has the size a real run would leave.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hippobot.cli.onboard import onboard
from hippobot.config import Settings, load_settings
from hippobot.context import tokens
from hippobot.context.budget import Budget
from hippobot.context.runtime import attach_runtime_context, runtime_context_block
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.messages import Message
from hippobot.session.model import Session, SessionUsage
from hippobot.session.records import snapshot
from hippobot.session.store import JsonlSessionStore

__all__ = [
    "KEY",
    "SEED",
    "Pregenerated",
    "Workload",
    "bench_env",
    "fixed_tokens",
    "make_settings",
    "pregenerate",
    "prepare_home",
]

SEED = 20260403
KEY = "cli:direct"
MODEL = "scripted-model"

_WORDS = str.split("""
database postgres sqlite migration schema index query backup replica latency timeout garden
tomato basil compost watering seedlings greenhouse harvest travel flight hotel passport visa
itinerary train airport luggage booking recipe dinner vegetarian pasta curry bread oven
dessert budget invoice salary taxes mortgage savings meeting deadline release roadmap sprint
review deploy rollback incident monitoring python rust typescript compiler refactor test
coverage docker kubernetes nginx cat dog vet walk birthday anniversary gift concert tickets
running marathon yoga sleep doctor dentist appointment novel podcast album guitar piano
chess photography camera lens the a to and of in is it you that for on with this be are as
at we can have not will your my was but so if or do about from what there just like more
because which would should could maybe really think need want please thanks also then
""")
_FACTS = [
    "prefers dark mode", "uses PostgreSQL for the side project", "has a cat named Luna",
    "is vegetarian", "runs on Tuesday mornings", "works in Lisbon", "plays the piano",
    "deploys with docker compose", "is allergic to peanuts", "reads sci-fi novels",
]


def _sentence(rng: random.Random, words: int) -> str:
    body = " ".join(rng.choice(_WORDS) for _ in range(words))
    return body[:1].upper() + body[1:] + rng.choice(".?!.")


def _paragraph(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        s = _sentence(rng, rng.randint(6, 18))
        parts.append(s)
        size += len(s) + 1
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Workload:
    """Texts of turn ``i`` (any ``i``; the same ``i`` always gives the same text)."""

    seed: int = SEED
    tool_every: int = 10  # every tool_every-th turn the model calls memory_search first

    def user_text(self, i: int) -> str:
        rng = random.Random(self.seed * 1_000_003 + 2 * i)
        text = _paragraph(rng, rng.randint(60, 600))
        if i % 7 == 3:
            text += f" FACT: {rng.choice(_FACTS)} (turn {i})"
        return text

    def reply_text(self, i: int) -> str:
        rng = random.Random(self.seed * 1_000_003 + 2 * i + 1)
        paragraphs = [_paragraph(rng, rng.randint(100, 500)) for _ in range(rng.randint(1, 3))]
        return "\n\n".join(paragraphs)

    def uses_tool(self, i: int) -> bool:
        return self.tool_every > 0 and i % self.tool_every == self.tool_every - 1

    def search_query(self, i: int) -> str:
        rng = random.Random(self.seed + i)
        return f"{rng.choice(_WORDS[:40])} {rng.choice(_WORDS[:40])}"


def bench_env(home: Path, api_base: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    """The environment a benchmarked hippobot runs with (no network: a loopback base)."""
    return {
        "HIPPOBOT_HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "HIPPOBOT_MODEL": MODEL,
        "HIPPOBOT_API_BASE": api_base,
        "HIPPOBOT_API_KEY": "sk-bench-0000000000000000",
    }


def make_settings(home: Path, *, context_window: int, api_base: str | None = None) -> Settings:
    """Onboarded settings under ``home`` with the given context window."""
    env = bench_env(home, api_base) if api_base else bench_env(home)
    settings = load_settings(env)
    onboard(settings)
    settings = settings.with_defaults(context_window_tokens=context_window)
    _write_window(settings, context_window)
    return settings


def _write_window(settings: Settings, context_window: int) -> None:
    """Put the window in config.json too, so a ``hippobot`` subprocess uses the same one."""
    import json

    from hippobot.config.loader import strip_json_comments

    path = settings.config_path
    data = json.loads(strip_json_comments(path.read_text(encoding="utf-8")) or "{}")
    data.setdefault("agents", {}).setdefault("defaults", {})["contextWindowTokens"] = context_window
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Pregenerated:
    turns: int
    messages: int
    last_consolidated: int
    history_entries: int
    session_bytes: int
    consolidated_at: tuple[int, ...]  # turn numbers where a consolidation happened


def _facts_of(messages: list[Message]) -> str:
    lines = []
    for m in messages:
        text = m.get("content")
        if m.get("role") == "user" and isinstance(text, str) and "FACT: " in text:
            lines.append("- [permanent] " + text.split("FACT: ", 1)[1].split("\n", 1)[0])
    return "\n".join(lines) or "- [permanent] (small talk only)"


def _user_message(text: str, moment: datetime, settings: Settings) -> Message:
    block = runtime_context_block(moment, settings.defaults.timezone, "cli", "direct")
    content, marker = attach_runtime_context(text, block)
    return {"role": "user", "content": content, "_runtime_context": marker,
            "timestamp": moment.isoformat(timespec="milliseconds")}


def pregenerate(settings: Settings, workload: Workload, turns: int, fixed_tokens: int) -> Pregenerated:
    """Write a session of ``turns`` plain turns as a real life would have left it.

    ``fixed_tokens`` is the system prompt plus tool schemas (what every request carries).
    Consolidation is replayed: when ``fixed + unconsolidated`` reaches the trigger, the
    oldest turns are archived (one history entry each time) until it is under the target.
    A session long enough to have consolidated ends as if a consolidation had just run, so
    every such N starts its measured turns with the same replay window.
    """
    d = settings.defaults
    budget = Budget(d.context_window_tokens, d.reply_tokens, d.consolidation_threshold,
                    d.consolidation_ratio)
    memory = MemoryStore(settings.workspace)
    start = datetime.now().astimezone() - timedelta(minutes=2 * turns + 10)
    messages: list[Message] = []
    costs: list[int] = []
    window = 0
    last = 0
    consolidated_at: list[int] = []
    for i in range(turns):
        moment = start + timedelta(minutes=2 * i)
        user = _user_message(workload.user_text(i), moment, settings)
        reply: Message = {"role": "assistant", "content": workload.reply_text(i),
                          "timestamp": (moment + timedelta(seconds=20)).isoformat(timespec="milliseconds")}
        for m in (user, reply):
            messages.append(m)
            costs.append(tokens.count_message(m))
            window += costs[-1]
        if budget.enabled and fixed_tokens + window >= budget.trigger:
            end = last
            while fixed_tokens + window > budget.target and end < len(messages) - 2:
                window -= costs[end] + costs[end + 1]
                end += 2  # user + assistant: always a legal, user-turn boundary
            memory.append_history(
                _facts_of(messages[last:end]), session_key=KEY,
                source=HistorySource(session=KEY, start=last, end=end),
                timestamp=moment.strftime("%Y-%m-%d %H:%M"),
            )
            last = end
            consolidated_at.append(i + 1)
    if consolidated_at and window + fixed_tokens > budget.target:
        # Same phase at every N: as if a consolidation just ran, so a session of 500 turns
        # and one of 5,000 replay windows of the same size and only N differs.
        end = last
        while fixed_tokens + window > budget.target and end < len(messages) - 2:
            window -= costs[end] + costs[end + 1]
            end += 2
        memory.append_history(
            _facts_of(messages[last:end]), session_key=KEY,
            source=HistorySource(session=KEY, start=last, end=end),
            timestamp=moment.strftime("%Y-%m-%d %H:%M"),
        )
        last = end
        consolidated_at.append(turns)
    if consolidated_at:
        memory.set_dream_cursor(memory.last_cursor())  # a scheduled Dream processed them
    session = Session(key=KEY, messages=messages, created_at=start.isoformat(timespec="milliseconds"),
                      last_consolidated=last)
    if messages:
        session.updated_at = messages[-1]["timestamp"]
        # What the last real turn would have recorded: its request's size and the reply's.
        reply = costs[-1]
        session.usage = SessionUsage(prompt_tokens=fixed_tokens + window - reply,
                                     completion_tokens=reply, cached_tokens=0,
                                     messages_at=len(messages), replay_start=last)
    path = JsonlSessionStore(settings.workspace).path_for(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = snapshot(session, with_meta=True)
    path.write_bytes(data)
    return Pregenerated(turns, len(messages), last, len(consolidated_at), len(data),
                        tuple(consolidated_at))


def fixed_tokens(settings: Settings) -> int:
    """Tokens every turn's request carries besides the history: system prompt and tools."""
    from hippobot.agent.agent import Agent

    agent = Agent(settings)
    registry = agent.tools_for(KEY)
    system = agent.prompts.system_prompt(Session(key=KEY), registry.names())
    return tokens.count_text(system.text) + tokens.count_tools(registry.schemas())


def prepare_home(home: Path, turns: int, *, context_window: int, workload: Workload,
                 index: bool = True) -> Pregenerated:
    """An onboarded home whose session has ``turns`` turns; the recall index is built, as a
    long-lived workspace would have it."""
    settings = make_settings(home, context_window=context_window)
    made = pregenerate(settings, workload, turns, fixed_tokens(settings))
    if index and turns:
        from hippobot.recall.index import RecallIndex

        recall = RecallIndex(settings.workspace)
        recall.sync()
        recall.close()
    return made
