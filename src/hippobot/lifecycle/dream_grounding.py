"""What Dream's edit phase may write: only what the batch's history entries (or the findings
of its analysis) say.

A small model asked to edit the memory files also fills what it sees empty. Qwen2.5-Coder-1.5B,
given "Hi! I'm Maya" and a locker code, turned USER.md's template field "- What to call me:"
into "- My name is Hippobot." and "- Tools and stack I use:" into "- I use Python, Git, and
Jupyter Notebook…", and the next session answered "What is my name?" with "Hippobot". None of
it was in the conversation.

:func:`keep_grounded` compares each file before and after the model's edits, line by line. A
line written stays when it is grounded: a heading, a blank line, a line the files already
held (moved or reworded), or a line whose names, numbers and most words are in the entries,
the findings or what the files say beyond their template (:func:`hippobot.factmatch.grounded`).
Any other line goes back to the line it replaced (or goes, when it was added). Removals stay:
what to drop is the model's call, and Dream's accounting checks that every fact of the batch
is still written. The findings are then placed by the code
(:mod:`hippobot.lifecycle.dream_apply`), so reverting an edit loses no finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from hippobot.factmatch import grounded, normalize_line, same_line
from hippobot.recall.boilerplate import memory_line

__all__ = ["Grounding", "keep_grounded"]


@dataclass(slots=True)
class Grounding:
    """The files with ungrounded edits undone, and the lines undone (``"USER.md: - …"``)."""

    files: dict[str, str]
    reverted: list[str] = field(default_factory=list)


def keep_grounded(before: Mapping[str, str], after: Mapping[str, str], sources: Iterable[str]) -> Grounding:
    """``after`` with every edit that writes something neither ``sources`` (the entries'
    text and the findings) nor the files of ``before`` say undone."""
    # What the files already say counts as said (a merge of two lines is grounded), but not
    # the template's prose: "How I like answers (short, detailed, with examples...)" would
    # ground an invented "- How I like answers: short and detailed, with examples". A
    # template line itself may move.
    held = [line for name, text in before.items() for line in text.splitlines() if memory_line(name)(line)]
    known = _Known(
        frozenset(normalize_line(line) for text in before.values() for line in text.splitlines()),
        held, "\n".join([*sources, *held]),
    )
    out = Grounding(dict(after))
    for name, new_text in after.items():
        old_text = before.get(name, "")
        if new_text == old_text:
            continue
        text, undone = _revert_ungrounded(old_text, new_text, known)
        out.files[name] = text
        out.reverted += [f"{name}: {line.strip()}" for line in undone]
    return out


def _revert_ungrounded(old: str, new: str, known: _Known) -> tuple[str, list[str]]:
    """``new`` with each ungrounded line it wrote put back to the line it replaced (the old
    line at the same place in the hunk, if any): "- What to call me:" filled with an
    invented name is the field again, a grounded line of the same hunk stays."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    parts: list[str] = []
    undone: list[str] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("equal", "delete"):
            parts += b[j1:j2]
            continue
        for k, line in enumerate(b[j1:j2]):
            if known.grounds(line):
                parts.append(line)
                continue
            undone.append(line)
            if i1 + k < i2:
                parts.append(a[i1 + k])
    text = "".join(parts)
    if text and not text.endswith("\n"):
        text += "\n"
    return text, undone


@dataclass(frozen=True, slots=True)
class _Known:
    """What an edit may say: the files' lines as they were, and the text they ground."""

    lines: frozenset[str]  # every line of the files before, normalised (template lines too)
    held: list[str]  # the lines that are memory, not template or empty slots
    source: str  # the entries' text and ``held``

    def grounds(self, line: str) -> bool:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return True  # structure: blank lines and headings
        if normalize_line(line) in self.lines:
            return True
        return any(same_line(line, old) for old in self.held) or grounded(line, self.source)
