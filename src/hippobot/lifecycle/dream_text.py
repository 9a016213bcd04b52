"""Dream's edit phase for models that cannot call tools: edits written as text, applied by code.

Dream's edit phase normally works through ``edit_file`` tool calls. A model that answers with
prose instead (or whose calls all failed) would leave the findings unapplied. When the edit
phase changed nothing, :func:`apply_text_edits` applies, in this order:

1. edit blocks the model wrote in its answer::

       EDIT USER.md
       <<<
       exact old text
       ===
       new text
       >>>

   (an empty old part appends the new text to the file), and ``APPEND <file>`` followed by
   ``- fact`` lines;
2. otherwise the phase-1 findings themselves: ``[USER]``/``[SOUL]``/``[MEMORY]`` facts are
   appended as ``- fact`` lines under a ``## Learned in conversation`` heading of the file they
   name (skipping facts the file already states), and ``[FILE-REMOVE] <file>: "<text>"``
   removes that exact text (its whole line when the text sits on one line).

Edits go to the files under ``root`` (Dream's staged copies), which Dream then applies as
usual. Only the three memory files can be touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LEARNED_HEADING",
    "TextEdit",
    "apply_edits",
    "apply_text_edits",
    "edits_from_findings",
    "parse_text_edits",
]

LEARNED_HEADING = "## Learned in conversation"
_FILES = {"USER.md": "USER.md", "SOUL.md": "SOUL.md", "MEMORY.md": "memory/MEMORY.md", "memory/MEMORY.md": "memory/MEMORY.md"}
_TAG_FILE = {"USER": "USER.md", "SOUL": "SOUL.md", "MEMORY": "memory/MEMORY.md"}
_EDIT = re.compile(
    r"^[ \t]*EDIT[ \t]+`?([\w./-]+)`?[ \t]*\n<<<[ \t]*\n(.*?)^===[ \t]*\n(.*?)^>>>[ \t]*$", re.M | re.S
)
_APPEND = re.compile(r"^[ \t]*APPEND[ \t]+`?([\w./-]+)`?[ \t]*\n((?:[ \t]*[-*][ \t]+.*(?:\n|$))+)", re.M)
_FINDING = re.compile(r"^\[(USER|SOUL|MEMORY)\]\s*(.+)$")
_REMOVE = re.compile(r"^\[(?:FILE|[A-Z]+)-REMOVE\]\s*`?([\w./-]+)`?\s*:\s*[\"“']?(.+?)[\"”']?\s*(?:[—–-]{1,2}\s.*)?$")
_WORDS = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class TextEdit:
    """Replace ``old`` (which must occur exactly once) by ``new``; ``old == ""`` appends."""

    file: str  # one of SOUL.md, USER.md, memory/MEMORY.md
    old: str
    new: str


def _file(name: str) -> str | None:
    return _FILES.get(name.strip().strip("`"))


def parse_text_edits(text: str) -> list[TextEdit]:
    """The ``EDIT``/``APPEND`` blocks of a model's answer (blocks naming other files are ignored)."""
    edits: list[TextEdit] = []
    for m in _EDIT.finditer(text or ""):
        name = _file(m.group(1))
        if name is not None:
            edits.append(TextEdit(name, m.group(2).rstrip("\n"), m.group(3).rstrip("\n")))
    for m in _APPEND.finditer(text or ""):
        name = _file(m.group(1))
        lines = [line.strip() for line in m.group(2).splitlines() if line.strip()]
        if name is not None and lines:
            edits.append(TextEdit(name, "", "\n".join("- " + line.lstrip("-* ").strip() for line in lines)))
    return edits


def edits_from_findings(findings: Sequence[str]) -> list[TextEdit]:
    """Append-lines and removals that apply phase-1 findings without any further model call."""
    edits: list[TextEdit] = []
    for finding in findings:
        remove = _REMOVE.match(finding)
        if remove is not None:
            name = _file(remove.group(1))
            if name is not None and remove.group(2).strip():
                edits.append(TextEdit(name, remove.group(2).strip(), ""))
            continue
        m = _FINDING.match(finding)
        if m is not None:
            fact = m.group(2).strip().rstrip(".")
            if fact:
                edits.append(TextEdit(_TAG_FILE[m.group(1)], "", f"- {fact}"))
    return edits


def _words(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def _append(current: str, addition: str) -> str:
    """``current`` with ``addition`` under the learned heading (created at the end if absent)."""
    fresh = [line for line in addition.splitlines() if _words(line) and _words(line) not in _words(current)]
    if not fresh:
        return current
    block = "\n".join(fresh)
    if LEARNED_HEADING in current:
        head, _, tail = current.partition(LEARNED_HEADING)
        section, sep, rest = tail.partition("\n#")
        return f"{head}{LEARNED_HEADING}{section.rstrip()}\n{block}\n" + (f"\n#{rest}" if sep else "")
    body = current.rstrip()
    return f"{body}\n\n{LEARNED_HEADING}\n{block}\n" if body else f"{LEARNED_HEADING}\n{block}\n"


def _replace(current: str, old: str, new: str) -> str | None:
    if current.count(old) != 1:
        return None
    if not new:  # a removal: take the whole line when the text is on one line
        start = current.rfind("\n", 0, current.index(old)) + 1
        end = current.find("\n", current.index(old) + len(old))
        line = current[start : (end if end >= 0 else len(current))]
        if "\n" not in old and line.strip().lstrip("-* ").strip().rstrip(".") == old.strip().lstrip("-* ").rstrip("."):
            return current[:start] + current[(end + 1 if end >= 0 else len(current)) :]
    return current.replace(old, new, 1)


def apply_edits(root: Path, edits: Iterable[TextEdit]) -> list[str]:
    """Apply ``edits`` to the files under ``root``; returns a line per edit that changed a file.

    An edit whose old text is missing or ambiguous is skipped (the file is left as it was).
    Blocking file work: call it through ``asyncio.to_thread``.
    """
    done: list[str] = []
    for edit in edits:
        path = root / edit.file
        try:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
        except OSError:
            continue
        updated = _append(current, edit.new) if not edit.old else _replace(current, edit.old, edit.new)
        if updated is None or updated == current:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(updated, encoding="utf-8")
        done.append(f"{edit.file}: {'added' if not edit.old else 'removed' if not edit.new else 'replaced'} "
                    f"{(edit.new or edit.old).splitlines()[0][:60]}")
    return done


def apply_text_edits(root: Path, findings: Sequence[str], answer: str) -> list[str]:
    """The text path: the answer's edit blocks if it has any, else the findings themselves."""
    edits = parse_text_edits(answer)
    if edits:
        done = apply_edits(root, edits)
        if done:
            return done
    return apply_edits(root, edits_from_findings(findings))
