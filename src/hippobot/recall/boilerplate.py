"""Which lines of a memory file are not memory: template text, empty bullets, bare headings.

A new workspace starts with template files (``SOUL.md``, ``USER.md``, ``memory/MEMORY.md``)
full of instructions and empty slots. None of that is something the user said or hippobot
learnt, yet its words ("who", "user", "about") match questions well, and its vectors sit
close to any question about the user. So the index never holds it:

* a line that appears, as is, in the bundled template of the same file (the template's
  prose, its empty ``- Name:`` slots, a template bullet left untouched) is skipped;
* a bullet with a label and nothing after it (``- Location / timezone:``) is skipped in any
  memory file;
* a heading is kept only with content under it: a chunk of nothing but headings is not a
  document.

What the user wrote into a template file (``- Name: Ada``) is indexed like any fact.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from hippobot.lazy_regex import lazy_compile
from hippobot.workspace import MEMORY_FILES

__all__ = ["is_heading", "line_filter", "memory_line"]

# "- Name:", "* Things to avoid:", "- [ ] Todo:", "-": a slot with nothing filled in.
_EMPTY_BULLET = lazy_compile(r"[-*+]\s*(\[[ xX]?\]\s*)?([^:]{0,80}:)?\s*")
_HEADING = lazy_compile(r"#{1,6}(\s|$)")
# Files that come from a bundled template; others only get the generic rules.
_TEMPLATED = MEMORY_FILES


def is_heading(line: str) -> bool:
    return _HEADING.match(line.strip()) is not None


@cache
def _template_lines(rel: str) -> frozenset[str]:
    if rel not in _TEMPLATED:
        return frozenset()
    # Lazy: the template's owner lives with the prompt's files; recall is imported by
    # commands that never build a prompt.
    from hippobot.context.loader import template_versions

    return frozenset(
        line.strip()
        for text in template_versions(rel)
        for line in text.splitlines()
        if line.strip() and not is_heading(line)
    )


def line_filter(rel: str) -> Callable[[str], bool]:
    """``skip(line)`` for the memory file ``rel``: True for a line that is not memory."""
    template = _template_lines(rel)

    def skip(line: str) -> bool:
        stripped = line.strip()
        if not stripped or is_heading(stripped):
            return False  # blank lines and headings are structure, handled by the chunker
        return stripped in template or _EMPTY_BULLET.fullmatch(stripped) is not None

    return skip


def memory_line(rel: str) -> Callable[[str], bool]:
    """``is_memory(line)`` for the memory file ``rel``: a line someone wrote or learnt, not
    structure (blank, heading) nor template text or an empty slot."""
    skip = line_filter(rel)
    return lambda line: bool(line.strip()) and not is_heading(line) and not skip(line)
