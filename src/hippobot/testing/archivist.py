"""A scripted-model fallback that behaves like a diligent archivist (tests, benchmarks).

Normal turns get a short acknowledgement. Archive requests (prefix mode or transcript mode) get
one ``- [kind] ...`` line per ``FACT:``/``CORRECTION:`` the slice contains, so a test can follow
planted facts through consolidation without a real model.
"""

from __future__ import annotations

import re

from hippobot.messages import content_text
from hippobot.testing.scripted import RecordedRequest

ARCHIVE_PREFIX = "[Memory archive request"
TRANSCRIPT_PREFIX = "You archive part of a conversation"
_FACT = re.compile(r"(FACT|CORRECTION): ([^\n\[]+)")


def _facts(texts: list[str]) -> list[str]:
    lines = []
    for text in texts:
        for kind, fact in _FACT.findall(text):
            tag = "correction" if kind == "CORRECTION" else "permanent"
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
        user_lines = [line for line in body.splitlines() if "] USER: " in line]
        return "\n".join(_facts(user_lines)) or "(nothing)"
    return f"ok ({len(request.messages)} messages seen)"
