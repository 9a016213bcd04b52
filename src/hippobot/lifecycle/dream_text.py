"""Dream's edit phase for models that cannot call tools: edits written as text.

In the optional edit phase (:mod:`dream_edit`), a model that answers with prose instead of
``edit_file`` calls may write its edits as blocks, which :func:`apply_text_edits` applies::

    EDIT USER.md
    <<<
    exact old text
    ===
    new text
    >>>

(an empty old part appends the new text to the file), and ``APPEND <file>`` followed by
``- fact`` lines. A block whose old text is missing or ambiguous is skipped: the findings
themselves reach the files anyway, placed by the code (:mod:`dream_apply`).
:func:`edits_from_findings` gives the findings in the same edit form (append or remove).

Edits go to the files under ``root`` (Dream's staged copies). Only the three memory files
can be touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hippobot.atomic import atomic_write_text
from hippobot.factmatch import find_statement, same_line
from hippobot.lazy_regex import lazy_compile
from hippobot.lifecycle.dream_apply import LEARNED_HEADING
from hippobot.lifecycle.dream_findings import parse_finding
from hippobot.workspace import MEMORY_FILES

__all__ = [
    "LEARNED_HEADING",
    "TextEdit",
    "apply_edits",
    "apply_text_edits",
    "edits_from_findings",
    "parse_text_edits",
]

# The memory files by the names a model writes: as listed, or by their bare file name.
_FILES = {**{name: name for name in MEMORY_FILES}, **{name.rsplit("/", 1)[-1]: name for name in MEMORY_FILES}}
_EDIT = lazy_compile(
    r"^[ \t]*EDIT[ \t]+`?([\w./-]+)`?[ \t]*\n<<<[ \t]*\n(.*?)^===[ \t]*\n(.*?)^>>>[ \t]*$", re.M | re.S
)
_APPEND = lazy_compile(r"^[ \t]*APPEND[ \t]+`?([\w./-]+)`?[ \t]*\n((?:[ \t]*[-*][ \t]+.*(?:\n|$))+)", re.M)


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
    """The findings as plain edits: an append per fact, a removal per ``[FILE-REMOVE]``
    that names its file (parsed by :func:`~hippobot.lifecycle.dream_findings.parse_finding`)."""
    edits: list[TextEdit] = []
    for line in findings:
        finding = parse_finding(line)
        if finding is None or finding.file is None:
            continue
        if finding.action == "remove":
            edits.append(TextEdit(finding.file, finding.text, ""))
        else:
            edits.append(TextEdit(finding.file, "", f"- {finding.text}"))
    return edits


def _said(line: str, current: str) -> bool:
    """Whether ``current`` already has ``line`` (the same heading, or a line stating it)."""
    if line.lstrip().startswith("#"):
        return line.strip() in (c.strip() for c in current.splitlines())
    return any(same_line(line, c) for c in current.splitlines()) or (
        find_statement(line, [("", current)]) is not None
    )


def _append(current: str, addition: str) -> str:
    """``current`` with ``addition`` under the learned heading (created at the end if absent);
    lines the file already states are left out."""
    fresh = [line for line in addition.splitlines() if line.strip() and not _said(line, current)]
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
        atomic_write_text(path, updated)  # as every staged copy: whole, or as it was
        done.append(f"{edit.file}: {'added' if not edit.old else 'removed' if not edit.new else 'replaced'} "
                    f"{(edit.new or edit.old).splitlines()[0][:60]}")
    return done


def apply_text_edits(root: Path, answer: str) -> list[str]:
    """Apply the ``EDIT``/``APPEND`` blocks of a model's answer to the files under ``root``."""
    return apply_edits(root, parse_text_edits(answer))
