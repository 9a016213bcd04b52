"""Pure helpers for archive summaries: parse the model's answer, format raw fallbacks.

Kept apart from the consolidator so they can be tested without a model or a workspace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hippobot.lazy_regex import lazy_compile
from hippobot.memory.facts import parse_fact_line, says_nothing
from hippobot.messages import Message, public_text

__all__ = [
    "RAW_MAX_CHARS",
    "SUMMARY_MAX_CHARS",
    "ParsedSummary",
    "format_transcript",
    "parse_summary",
    "raw_entry",
    "summary_from_tool_call",
]

RAW_MAX_CHARS = 16_000
SUMMARY_MAX_CHARS = 8_000
KINDS = ("permanent", "durable", "ephemeral", "correction")
_NOTHING = lazy_compile(r"^\W*(\(nothing\)|nothing|none|\[skip\].*)\W*$", re.I)
_THINK = lazy_compile(r"<think>.*?</think>", re.S | re.I)


@dataclass(frozen=True, slots=True)
class ParsedSummary:
    """``lines`` are normalised ``- [kind] fact`` lines; ``nothing`` means a valid empty answer."""

    lines: tuple[str, ...]
    nothing: bool = False
    rejected: int = 0  # lines that followed no format
    invented: tuple[str, ...] = ()  # lines left out: they name what the request never showed

    @property
    def ok(self) -> bool:
        return self.nothing or bool(self.lines)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def parse_summary(text: str) -> ParsedSummary:
    """Accept the line format; reject an answer in which no line follows it.

    Stray prose lines next to valid fact lines are dropped (counted in ``rejected``), so a model
    that adds "Here are the facts:" still archives its facts. So are lines that only say what
    was not said ("[correction] The user's name was not mentioned"): an answer of those alone
    is an empty one.
    """
    text = _THINK.sub("", text or "").strip()
    if not text:
        return ParsedSummary(())
    lines: list[str] = []
    seen: set[str] = set()
    rejected = unsaid = 0
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("```"):
            continue
        fact = parse_fact_line(raw)
        if fact is None:
            rejected += 1
            continue
        if says_nothing(fact.text):
            unsaid += 1
            continue
        line = f"- [{fact.kind}] {fact.text}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    if not lines and (unsaid or _NOTHING.match(text)):
        return ParsedSummary((), nothing=True)
    return ParsedSummary(tuple(lines), rejected=rejected)


def summary_from_tool_call(arguments: str) -> ParsedSummary:
    """Parse a ``save_summary`` tool call: ``{"facts": [{"kind": ..., "text": ...}]}``."""
    try:
        data = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return ParsedSummary(())
    facts = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(facts, list):
        return ParsedSummary(())
    if not facts:
        return ParsedSummary((), nothing=True)
    lines = []
    unsaid = 0
    for f in facts:
        if isinstance(f, dict) and str(f.get("kind", "")).lower() in KINDS and str(f.get("text", "")).strip():
            kind = str(f["kind"]).lower()
            text = str(f["text"]).strip()
            if says_nothing(text):
                unsaid += 1  # "the user's name was not mentioned" is no fact
                continue
            lines.append(f"- [{kind}] {text}{_reference(f.get('replaces'), text, kind)}")
    return ParsedSummary(tuple(dict.fromkeys(lines)), nothing=not lines and unsaid > 0)


_CURSOR_REF = lazy_compile(r"^\s*(?:history)?#?(\d+)\s*(?::\s*(.*?))?\s*$", re.I)


def _reference(replaces: object, text: str, kind: str) -> str:
    """`` (replaces: <earlier fact>)`` / `` (replaces #N: ...)`` for a fact that names what it
    replaces, so Dream's accounting reads which fact a correction replaces instead of guessing."""
    if kind == "ephemeral" or not isinstance(replaces, str) or not replaces.strip():
        return ""
    value = " ".join(replaces.split()).strip(" ()")
    if "(replaces" in text.lower():
        return ""
    m = _CURSOR_REF.match(value)
    if m is not None:
        return f" (replaces #{m.group(1)}: {m.group(2)})" if m.group(2) else f" (replaces #{m.group(1)})"
    return f" (replaces: {value})"


SAVE_SUMMARY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "save_summary",
        "description": "Save the facts and decisions worth remembering from the transcript.",
        "parameters": {
            "type": "object",
            "properties": {
                "facts": {
                    "type": "array",
                    "description": "One atomic fact or decision per item; empty if nothing is worth keeping.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string", "enum": list(KINDS)},
                            "text": {"type": "string"},
                            "replaces": {
                                "type": "string",
                                "description": (
                                    "Only when this fact corrects or replaces an earlier one: "
                                    "that earlier fact, in the words it was recorded with."
                                ),
                            },
                        },
                        "required": ["kind", "text"],
                    },
                }
            },
            "required": ["facts"],
        },
    },
}


def format_transcript(messages: Sequence[Message], *, max_chars: int | None = None) -> str:
    """``[time] ROLE: text`` lines (runtime context stripped, tool calls named)."""
    out: list[str] = []
    for m in messages:
        if m.get("_command"):
            continue
        role = str(m.get("role", "unknown")).upper()
        ts = str(m.get("timestamp") or "?")[:16]
        text = public_text(m)
        calls = m.get("tool_calls") or []
        if calls:
            names = ", ".join(c.get("function", {}).get("name", "?") for c in calls)
            text = f"{text} [tools: {names}]".strip()
        if m.get("media"):
            text = "\n".join(f"[image: {p}]" for p in m["media"]) + ("\n" + text if text else "")
        if not text:
            continue
        out.append(f"[{ts}] {role}: {text}")
    result = "\n".join(out)
    if max_chars is not None and len(result) > max_chars:
        result = result[:max_chars]
    return result


def raw_entry(
    messages: Sequence[Message], *, session_key: str, start: int, end: int, reason: str,
    max_chars: int = RAW_MAX_CHARS, facts: Sequence[str] = (),
) -> str:
    """The bounded ``[RAW]`` fallback; it says where the full messages still are.

    ``facts`` (``- [kind] text`` lines: what the user stated) come first, so Dream and
    Recent History still find them as fact lines in a dump no model summarised."""
    header = f"[RAW] {end - start} messages (summary failed: {reason})"
    kept: list[str] = []
    for line in facts:  # whole lines, within a quarter of the bound
        if sum(len(k) + 1 for k in kept) + len(line) > max_chars // 4:
            break
        kept.append(line)
    stated = "\n".join(kept)
    room = max_chars - len(stated)
    body = format_transcript(messages)
    if len(body) > room:
        body = body[:room] + (
            f"\n... (truncated; the full messages remain in session {session_key} "
            f"#{start}-{end - 1})"
        )
    return "\n".join(part for part in (header, stated, body) if part)
