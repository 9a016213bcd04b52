"""A scripted-model fallback that behaves like a diligent archivist (tests, benchmarks).

Normal turns get a short acknowledgement. Archive requests (prefix mode or transcript mode) get
one ``- [kind] ...`` line per ``FACT:``/``CORRECTION:``/``NOTE:`` (ephemeral) the slice contains, so a test can follow
planted facts through consolidation without a real model. :func:`dreamer` plays Dream the same
way: it files every durable fact into USER.md and replaces what a correction supersedes.
"""

from __future__ import annotations

import re

from hippobot.lazy_regex import lazy_compile
from hippobot.messages import content_text
from hippobot.testing.scripted import FallbackReply, RecordedRequest
from hippobot.workspace import USER_MD

ARCHIVE_PREFIX = "[Memory archive request"
TRANSCRIPT_PREFIX = "You archive part of a conversation"
_MESSAGE = lazy_compile(r"(?m)^\[[^\]\n]*\] ([A-Z]+): ")
_FACT = lazy_compile(r"(FACT|CORRECTION|NOTE): ([^\n\[]+)")


def _facts(texts: list[str]) -> list[str]:
    lines = []
    for text in texts:
        for kind, fact in _FACT.findall(text):
            tag = {"CORRECTION": "correction", "NOTE": "ephemeral"}.get(kind, "permanent")
            lines.append(f"- [{tag}] {fact.strip()}")
    return lines


def is_archive_request(request: RecordedRequest) -> bool:
    last = request.last_user_text()
    return last.startswith(ARCHIVE_PREFIX) or last.startswith(TRANSCRIPT_PREFIX)


def archivist(request: RecordedRequest) -> str:
    last = request.last_user_text()
    if last.startswith(ARCHIVE_PREFIX):
        found = re.search(r"Archive the first (\d+) messages", last)
        count = int(found.group(1)) if found else 0
        convo = [m for m in request.messages[1:-1]][:count]
        lines = _facts([content_text(m.get("content")) for m in convo if m.get("role") == "user"])
        return "\n".join(lines) or "(nothing)"
    if last.startswith(TRANSCRIPT_PREFIX):
        body = last.split("<transcript", 1)[1].split("</transcript>", 1)[0]
        # one block per message: a user's text may span lines (a fact on its second line)
        blocks = _MESSAGE.split(body)
        users = [text for role, text in zip(blocks[1::2], blocks[2::2], strict=True) if role == "USER"]
        return "\n".join(_facts(users)) or "(nothing)"
    return f"ok ({len(request.messages)} messages seen)"


# --- a diligent Dream -------------------------------------------------------------------

PHASE1_MARK = "## Task: analysis"
PHASE2_MARK = "## Task: apply the findings"
MISSING_MARK = "## Task: facts still missing"
FACTS_HEADING = "## Facts"


def is_dream_request(request: RecordedRequest) -> bool:
    text = request.messages[0].get("content") if request.messages else ""
    text = content_text(text)
    return PHASE1_MARK in text or PHASE2_MARK in text or MISSING_MARK in text


def _section(text: str, start: str, end: str | None) -> str:
    body = text.split(start, 1)[1] if start in text else ""
    return body.split(end, 1)[0] if end and end in body else body


def _shown_user_md(prompt: str) -> str:
    body = _section(prompt, "### USER.md\n", "### memory/MEMORY.md")
    return "" if body.strip() == "(empty)" else body.strip("\n")


def dream_findings(prompt: str) -> str:
    """Phase 1: one ``[USER]`` finding per durable history fact not in USER.md yet."""
    from hippobot.memory.facts import fact_lines, find_statement, split_correction

    user = _shown_user_md(prompt)
    history = _section(prompt, "## Conversation history", None)
    out = []
    for raw in history.splitlines():
        for line in fact_lines(raw.split("] ", 1)[1] if raw.startswith("[#") else raw):
            if not line.durable:
                continue
            claim = split_correction(line.text)[0] if line.kind == "correction" else line.text
            if find_statement(claim, [(USER_MD, user)], loose=line.kind == "correction"):
                continue
            out.append(f"[USER] {line.text}")
    return "\n".join(out) or "[SKIP] nothing new"


def dream_edits(prompt: str, *, sloppy: bool = False) -> FallbackReply:
    """Phase 2: ``edit_file`` calls that add each finding to USER.md under ``## Facts`` and
    replace the line a correction supersedes (``sloppy``: leave that line in place)."""
    from hippobot.memory.facts import mentions_old_value, split_correction

    user = _shown_user_md(prompt)
    findings = _section(prompt, "## Findings\n", "## Current memory files")
    facts = [line[len("[USER] "):] for line in findings.splitlines() if line.startswith("[USER] ")]
    facts += [line[2:].split(" (still stated at", 1)[0] for line in findings.splitlines()
              if line.startswith("- ") and "Not accounted for yet" in findings]
    calls: list[tuple[str, dict[str, str] | str]] = []
    lines = user.splitlines()
    for fact in dict.fromkeys(facts):
        new, old = split_correction(fact)
        if old and not sloppy:
            for stale in [ln for ln in lines if mentions_old_value(ln, old, new)]:
                calls.append(("edit_file", {"path": USER_MD, "old_text": stale, "new_text": f"- {new}"}))
                lines = [f"- {new}" if ln == stale else ln for ln in lines]
            if any(f"- {new}" == ln for ln in lines):
                continue
        if FACTS_HEADING not in lines:
            first = lines[0] if lines else ""
            calls.append(("edit_file", {"path": USER_MD, "old_text": first,
                                        "new_text": f"{first}\n\n{FACTS_HEADING}\n- {new}"}))
            lines = [first, "", FACTS_HEADING, f"- {new}", *lines[1:]]
        else:
            calls.append(("edit_file", {"path": USER_MD, "old_text": f"{FACTS_HEADING}\n",
                                        "new_text": f"{FACTS_HEADING}\n- {new}\n"}))
            at = lines.index(FACTS_HEADING) + 1
            lines.insert(at, f"- {new}")
    return FallbackReply("", tuple(calls)) if calls else FallbackReply("Nothing to change.")


def dream_missing(prompt: str) -> str:
    """The retry for facts still missing: the finding line shown for each one, in USER.md."""
    listed = _section(prompt, MISSING_MARK, "## Current memory files")
    lines = [re.sub(r"^\[(?:MEMORY|SOUL)\]", "[USER]", line) for line in listed.splitlines()
             if line.startswith(("[USER] ", "[MEMORY] ", "[SOUL] "))]
    return "\n".join(lines) or "[SKIP] nothing new"


def dreamer(request: RecordedRequest, *, sloppy: bool = False) -> str | FallbackReply:
    """A scripted Dream: phase 1 lists the facts, phase 2 writes them, then says so."""
    prompt = request.last_user_text()
    if PHASE1_MARK in prompt:
        return dream_findings(prompt)
    if MISSING_MARK in prompt:
        return dream_missing(prompt)
    if any(m.get("role") == "tool" for m in request.messages):
        return "Applied the findings."
    return dream_edits(prompt, sloppy=sloppy)


def archivist_and_dreamer(request: RecordedRequest) -> str | FallbackReply:
    """:func:`archivist` for turns and archive requests, :func:`dreamer` for Dream."""
    return dreamer(request) if is_dream_request(request) else archivist(request)
