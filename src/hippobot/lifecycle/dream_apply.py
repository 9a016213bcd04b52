"""How Dream's findings reach the memory files: deterministic placement, no model involved.

The analysis decides *what* (:class:`~hippobot.lifecycle.dream_findings.Finding`); this
module decides *how*, on the file texts, so a finding lands even when a model cannot copy
a line exactly:

- **add** — a fact some memory file already states (the fact matcher,
  :mod:`hippobot.factmatch`) is not written again. Otherwise it becomes a ``- fact`` line
  at the end of a section: the heading the model named (matched forgivingly, created when
  missing); else the section whose heading and lines share the most words with the fact;
  else ``## Learned in conversation`` (created at the end of the file).
- **replace** — an add that names an old value ("Osaka, not Tokyo") or the line it
  replaces takes the place of the line that still says it; further lines saying it go.
  A line that also carries something else ("Lives in Tokyo with Sam") is left alone, so a
  replacement never loses another fact: the accounting then reports it as stale.
- **remove** — the line that states the named text (under the named heading if there is
  one, else in the named file, else in any memory file) goes, when exactly one best line
  is found; nothing is removed on a guess.

Replacements run first (in place), then removals, then additions: a removal of the old
line after its replacement finds nothing, and a fact the batch adds is not taken out again.
Pure functions over ``{file name: text}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hippobot.factmatch import (
    content_words,
    find_statement,
    heading_matches,
    keywords,
    line_similarity,
    mentions_old_value,
    split_sentences,
    states,
    stem,
)
from hippobot.lazy_regex import lazy_compile
from hippobot.lifecycle.dream_findings import Finding
from hippobot.lifecycle.stated_facts import about_the_user
from hippobot.recall.auto import recalled_text
from hippobot.workspace import MEMORY_MD

__all__ = ["LEARNED_HEADING", "Placement", "apply_findings", "as_memory_line"]

LEARNED_HEADING = "## Learned in conversation"
_HEADING = lazy_compile(r"^(#{1,6})\s+\S")
_MARK = lazy_compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)")
_SECTION_MIN = 2  # shared words (a heading word counts twice) to choose a section


@dataclass(slots=True)
class Placement:
    """The files after the findings, and one line per change (for the log and reports)."""

    files: dict[str, str]
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already present, or nothing found


def apply_findings(files: Mapping[str, str], findings: Iterable[Finding]) -> Placement:
    """``files`` with ``findings`` applied: replacements, then removals, then additions."""
    out = Placement(dict(files))
    ordered = sorted(findings, key=_order)
    for finding in ordered:
        if finding.action == "remove":
            _remove(out, finding)
        else:
            _add(out, finding)
    return out


def _order(finding: Finding) -> int:
    if finding.action == "remove":
        return 1
    return 0 if finding.old or finding.replaces else 2


# --- sections -------------------------------------------------------------------------


def _level(line: str) -> int:
    m = _HEADING.match(line)
    return len(m.group(1)) if m else 0


def _section_end(lines: Sequence[str], heading_at: int) -> int:
    """Index after the last non-blank line of the section that starts at ``heading_at``
    (its own lines: a sub-heading ends them too)."""
    last = heading_at
    for i in range(heading_at + 1, len(lines)):
        if _level(lines[i]):
            break
        if lines[i].strip():
            last = i
    return last + 1


def _headings(lines: Sequence[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if _level(line)]


def _new_heading_level(lines: Sequence[str]) -> int:
    levels = [_level(lines[i]) for i in _headings(lines) if _level(lines[i]) > 1]
    return max(set(levels), key=levels.count) if levels else 2


def _best_section(lines: Sequence[str], fact: str) -> int | None:
    """The heading (not the file's title) whose words and lines share most with ``fact``."""
    wanted = {stem(w) for w in content_words(fact)}
    best, best_score = None, 0
    for at in _headings(lines):
        if _level(lines[at]) == 1:
            continue
        title = {stem(w) for w in content_words(lines[at].lstrip("#"))}
        body = {stem(w) for line in lines[at + 1 : _section_end(lines, at)] for w in content_words(line)}
        score = 2 * len(wanted & title) + len(wanted & (body - title))
        if score > best_score:
            best, best_score = at, score
    return best if best_score >= _SECTION_MIN else None


def _insert(text: str, line: str, heading: str) -> str:
    """``text`` with ``line`` at the end of the section ``heading`` names (created at the end
    of the file when missing), or of the best-matching section, or of the learned one."""
    lines = text.splitlines()
    at = next((i for i in _headings(lines) if heading and heading_matches(lines[i], heading)), None)
    if at is None and not heading:
        at = _best_section(lines, line)
        if at is None:
            at = next((i for i in _headings(lines) if lines[i].strip() == LEARNED_HEADING), None)
    if at is None:
        title = heading.lstrip("#").strip() if heading else ""
        new = f"{'#' * _new_heading_level(lines)} {title}" if title else LEARNED_HEADING
        body = "\n".join(lines).rstrip()
        return f"{body}\n\n{new}\n{line}\n" if body else f"{new}\n{line}\n"
    end = _section_end(lines, at)
    lines.insert(end, line)
    after = end + 1
    if after < len(lines) and lines[after].strip() and _level(lines[after]):
        lines.insert(after, "")  # keep a blank line before the next heading
    return "\n".join(lines) + "\n"


# --- add and replace --------------------------------------------------------------------


def as_memory_line(fact: str) -> str:
    """A history fact as a memory line: a leading "User said:" or "Remember that" dropped,
    and the rest as the history states it but about the user, in the third person
    (:func:`~hippobot.lifecycle.stated_facts.about_the_user`: both files' lines are what
    hippobot knows about the user, never the user's own words)."""
    text = re.sub(
        r"^(?:the\s+)?user\s+(?:said|says|mentioned|stated|asked to remember)\s*(?:that\s*)?:?\s*",
        "", fact.strip(), flags=re.I,
    )
    text = re.sub(r"^(?:please\s+)?remember(?:\s+this|\s+that)?\s*:?\s*", "", text, flags=re.I)
    text = about_the_user(text.strip()).rstrip(".")
    return text[:1].upper() + text[1:] if text else fact.strip()


def _as_line(text: str, like: str = "- ") -> str:
    m = _MARK.match(like)
    return f"{m.group(1) if m else '- '}{text}"


def _loses_nothing(line: str, allowed: str) -> bool:
    """Whether taking ``line`` out loses nothing beyond ``allowed``: no name or number it
    does not hold, at most two other words ("- Lives in central Tokyo" for "Tokyo"). A line
    copied from recalled memory is judged on what it says, not on where and when it was said
    (its citation, date and speaker)."""
    line_salient, line_other = keywords(recalled_text(line))
    said = {stem(w) for group in keywords("x " + allowed) for w in group}
    extra_salient = {stem(w) for w in line_salient} - said
    extra_other = {stem(w) for w in line_other} - said
    return not extra_salient and len(extra_other) <= 2


_QUALIFIER = r",\s*((?:[A-Z][\w'-]*)(?:\s+[A-Z][\w'-]*)?)"
"""A name after a comma: "Tokyo, Japan", "Portland, Oregon", "Initech, Berlin"."""


def _qualified(old: str) -> list[re.Pattern[str]]:
    """Each name of ``old`` with the names a comma puts right after it (group 2)."""
    return [re.compile(rf"\b({re.escape(name)}){_QUALIFIER}", re.I) for name in keywords("x " + old)[0]]


def _qualifiers(line: str, old: str) -> str:
    """The names ``line`` puts right after a name of ``old``, after a comma: they qualify
    the old value and go with it. A small model archived "I live in Tokyo" as "I live in
    Tokyo, Japan"; the correction to Osaka must replace that line (and a removal of "Lives
    in Tokyo" remove it), while "- Lives in Tokyo with my partner Sam" keeps Sam (and its
    line)."""
    return " ".join(m.group(2) for pattern in _qualified(old) for m in pattern.finditer(line))


def _unqualified(line: str, old: str) -> str:
    """``line`` without the :func:`_qualifiers` of ``old``'s names ("I live in Tokyo")."""
    for pattern in _qualified(old):
        line = pattern.sub(r"\1", line)
    return line


def _stale_lines(files: Mapping[str, str], finding: Finding) -> list[tuple[str, int]]:
    """(file, line index) of the lines that still say what ``finding`` replaces, the named
    file first."""
    found: list[tuple[str, int]] = []
    order = [finding.file] + [n for n in files if n != finding.file]
    for name in order:
        if name is None or name not in files:
            continue
        for i, line in enumerate(files[name].splitlines()):
            if not line.strip() or _level(line):
                continue
            if (finding.old and mentions_old_value(line, finding.old, finding.text)) or (
                finding.replaces
                and not states(line, finding.text, loose=True)
                and (states(line, finding.replaces) or line_similarity(line, finding.replaces) >= 0.85)
            ):
                found.append((name, i))
    return found


def _add(out: Placement, finding: Finding) -> None:
    if not any(keywords(finding.text)):  # "Name:", "- ...": nothing a file could state
        out.skipped.append(f"{finding.text!r} states nothing")
        return
    present = find_statement(finding.text, out.files.items())
    edits: dict[str, dict[int, str | None]] = {}  # file -> line index -> new line (None: drop)
    old_value = " ".join(v for v in (finding.old, finding.replaces) if v)
    for name, i in _stale_lines(out.files, finding) if old_value else []:
        line = out.files[name].splitlines()[i]
        if not _loses_nothing(line, f"{old_value} {_qualifiers(line, old_value)} {finding.text}"):
            out.skipped.append(f"{name}: kept {line.strip()!r}: it says more than {finding.old or finding.replaces!r}")
            continue
        if present is None:
            edits.setdefault(name, {})[i] = _as_line(finding.text, line)
            present = f"{name}:{i + 1}"
            out.done.append(f"{name}: replaced {line.strip()!r} with {finding.text!r}")
        else:
            edits.setdefault(name, {})[i] = None
            out.done.append(f"{name}: removed {line.strip()!r} ({finding.text!r} replaces it)")
    for name, changes in edits.items():
        lines = out.files[name].splitlines()
        kept = [changes.get(i, line) for i, line in enumerate(lines)]
        out.files[name] = "\n".join(line for line in kept if line is not None) + "\n"
    if present is not None:
        if not edits:
            out.skipped.append(f"{finding.text!r} is already stated ({present})")
        return
    file = finding.file or MEMORY_MD
    sentences = split_sentences(finding.text)
    rest = []  # a sentence that fills a template field goes there, the others on a line
    for sentence in sentences:
        filled = _fill_field(out.files.get(file, ""), sentence)
        if filled is None:
            rest.append(sentence)
        else:
            out.files[file] = filled
            out.done.append(f"{file}: filled in {sentence!r}")
    text = " ".join(rest)
    if not rest or (len(rest) < len(sentences) and find_statement(text, out.files.items())):
        return  # the field took the news; the rest the files already say
    out.files[file] = _insert(out.files.get(file, ""), _as_line(text), finding.heading)
    where = f" under {finding.heading!r}" if finding.heading else ""
    out.done.append(f"{file}: added {text!r}{where}")
    given = _introduced_name(text)
    named = _fill_field(out.files[file], f"Name: {given}") if given else None
    if named is not None:
        out.files[file] = named
        out.done.append(f"{file}: filled in 'Name: {given}' (from {finding.text!r})")


_FIELD = lazy_compile(r"^(\s*[-*]\s+)([^:\n]{1,40}?)\s*:\s*$")
_LABELLED = lazy_compile(r"^([^:\n]{1,40}?)\s*:\s*(\S.*)$")


# "User's name is Maya", "My name is Maya": a fact about one of the user's fields.
_POSSESSIVE = lazy_compile(r"^(?:the\s+)?(?:user|my)(?:'s|’s)?\s+([\w /-]{1,40}?)\s+is\s+(\S.*?)\.?$", re.I)


# How people say their name: "Hi! I'm Maya.", "My name is Maya", "Call me Maya". A greeting
# is asked for before "I'm": "I'm Japanese" says something else.
_INTRODUCTION = lazy_compile(
    r"(?:\bmy name is|\bcall me|^(?:hi|hello|hey)\b[\s!,.]*(?:there[\s!,.]*)?(?:i'm|i am))\s+([A-Z][\w'-]+)",
    re.I,
)


def _introduced_name(fact: str) -> str | None:
    """The name the user gave in ``fact``, if it is a self-introduction."""
    m = _INTRODUCTION.search(fact.strip())
    return m.group(1) if m is not None and m.group(1)[0].isupper() else None


def _fill_field(text: str, fact: str) -> str | None:
    """``text`` with an empty template field (``- Name:``) filled in by a fact written as
    ``Name: Maya`` or ``User's name is Maya``; ``None`` when the file has no such empty
    field. USER.md's "- Name:" stayed empty while "User's name is Maya" went under
    "Learned in conversation", and the name field is what a small model reads for "What is
    my name?"."""
    m = _LABELLED.match(fact) or _POSSESSIVE.match(fact.strip())
    if m is None:
        return None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        field = _FIELD.match(line)
        if field is not None and heading_matches(field.group(2), m.group(1)):
            lines[i] = f"{field.group(1)}{field.group(2)}: {m.group(2)}"
            return "\n".join(lines) + "\n"
    return None


# --- remove -----------------------------------------------------------------------------


def _candidates(text: str, finding: Finding) -> list[tuple[float, int]]:
    lines = text.splitlines()
    scope = range(len(lines))
    if finding.heading:
        at = next((i for i in _headings(lines) if heading_matches(lines[i], finding.heading)), None)
        if at is not None:
            scope = range(at + 1, _section_end(lines, at))
    out = []
    for i in scope:
        line = lines[i]
        if not line.strip() or _level(line):
            continue
        bare = _unqualified(line, finding.text)
        score = line_similarity(bare, finding.text)
        if score >= 0.85 or states(bare, finding.text):
            out.append((max(score, 0.5), i))
    return out


def _remove(out: Placement, finding: Finding) -> None:
    names = [finding.file] if finding.file in out.files else list(out.files)
    hits = [(score, name, i) for name in names if name for score, i in _candidates(out.files[name], finding)]
    if not hits:
        out.skipped.append(f"nothing states {finding.text!r} to remove")
        return
    hits.sort(key=lambda h: -h[0])
    if len(hits) > 1 and hits[0][0] == hits[1][0]:
        out.skipped.append(f"{len(hits)} lines match {finding.text!r}; none removed")
        return
    _, name, i = hits[0]
    lines = out.files[name].splitlines()
    if not _loses_nothing(lines[i], f"{finding.text} {_qualifiers(lines[i], finding.text)}"):
        out.skipped.append(f"{name}: kept {lines[i].strip()!r}: it says more than {finding.text!r}")
        return
    removed = lines.pop(i)
    out.files[name] = "\n".join(lines) + ("\n" if lines else "")
    out.done.append(f"{name}: removed {removed.strip()!r}")
