"""What Dream's analysis said: finding lines, parsed into values the code can apply.

The analysis answers one finding per line (SPEC 4.4)::

    [USER] Has a cat named Luna                    add to USER.md (the code picks the heading)
    [USER:Pets] Has a cat named Luna               ... under "Pets" (created when missing)
    [USER] Lives in Osaka, not Tokyo               a correction: replaces the line that says Tokyo
    [MEMORY] Uses Postgres 16 (replaces: Uses Postgres 15)   names the line it replaces
    [FILE-REMOVE] USER.md: "Lives in Tokyo" — moved          remove (``USER.md > Pets: ...``
    [USER-REMOVE] "Lives in Tokyo" — moved                    scopes it to a heading)
    [SKIP] "<history fact>" — reason                          decline a fact of the history

The model decides *what* (these lines); how they reach the files is
:mod:`hippobot.lifecycle.dream_apply`'s business. A small model's spelling must not decide
whether a fact survives, so the parser is forgiving: tags in any case, ``[USER.md]``,
``[User Profile]``, the history's own tags (``[permanent]`` ...) and list markers are read;
only the file a tag names, never its exact spelling, is kept.

Pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from hippobot.factmatch import same_line
from hippobot.lazy_regex import lazy_compile
from hippobot.memory.facts import replaces_ref, split_correction
from hippobot.workspace import MEMORY_MD, SOUL_MD, USER_MD

__all__ = ["Finding", "parse_finding", "parse_findings", "parse_rejections"]

_TAGGED = lazy_compile(r"^\s*(?:[-*•]|\d+[.)])?\s*\[([^\]\n]{1,60})\]\s*[:\-–]?\s*(.*?)\s*$")
_HEADING_SEP = lazy_compile(r"\s*(?:[:/>|]|\s-\s)\s*")
_REMOVE_BODY = lazy_compile(
    r"^(?:`?(?P<file>[\w./-]+\.md)`?(?:\s*(?:>|/|:)\s*(?P<heading>[^:\"“”]+?))?\s*:\s*)?"
    r"[\"“']?(?P<text>.+?)[\"”']?\s*(?:(?:—|–|\s-\s|--).*)?$"
)
_REJECT = lazy_compile(r"^\s*[-*]?\s*\[SKIP\]\s*(.+?)\s*(?:—|–| - |:)\s*(.+?)\s*$", re.I)
# A quoted fact may itself hold a colon or dash ("User said: ..."): the quotes delimit it.
_REJECT_QUOTED = lazy_compile(r'^\s*[-*]?\s*\[SKIP\]\s*["“](.+?)["”]\s*(?:—|–| - |:)\s*(.+?)\s*$', re.I)

# What a model writes when it has nothing to say, in a finding's place.
_NOTHING = lazy_compile(r"^(?:none|nothing(?: new)?(?: to (?:add|change|update))?|n/?a|no (?:new )?(?:facts?|findings?|changes?|updates?)\b.*)\W*$", re.I)
# The prompts' own placeholder lines, which small models copy back as findings.
_PLACEHOLDERS = (
    "atomic fact for USER.md (not already there)", "behaviour rule for SOUL.md",
    "atomic fact for memory/MEMORY.md", "the same, under that heading of the file (it is created if missing)",
    "the fact, for USER.md", "the fact, for memory/MEMORY.md", "a behaviour rule, for SOUL.md",
    "<text to remove>", "<exact text to remove>",
)
_FILE_WORDS = (("SOUL", SOUL_MD), ("USER", USER_MD), ("MEMORY", MEMORY_MD))
_HISTORY_TAGS = ("PERMANENT", "DURABLE", "CORRECTION", "FACT")
_HISTORY_TAG_IN_BODY = lazy_compile(rf"^(?:\[(?:{'|'.join(_HISTORY_TAGS)})\]\s*)+", re.I)
"""The history's tag copied after the file's: "[USER] [permanent] I live in Osaka now"
(the local model) is placed as "I live in Osaka now", not with the tag in the line."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding, as the code applies it.

    ``add``: ``text`` should be stated in ``file`` (under ``heading`` if the model named
    one); ``old`` is a value it replaces ("Tokyo"), ``replaces`` the earlier line the model
    says it replaces. ``remove``: a line like ``text`` goes (from ``file``, or from any
    memory file when the model named none we know; only under ``heading`` if given).
    """

    action: Literal["add", "remove"]
    file: str | None
    text: str
    heading: str = ""
    old: str | None = None
    replaces: str | None = None
    line: str = ""  # the finding as normalised for reports: "[USER] Has a cat named Luna"


def _tag_file(tag: str) -> str | None:
    upper = tag.upper()
    for word, name in _FILE_WORDS:
        if word in upper:
            return name
    return None


def _split_tag(tag: str) -> tuple[str, str]:
    """``("USER", "Pets")`` for ``USER:Pets`` / ``USER > Pets``; ``(tag, "")`` otherwise."""
    parts = _HEADING_SEP.split(tag.strip(), maxsplit=1)
    if len(parts) == 2 and parts[1].strip():
        return parts[0].strip(), parts[1].strip()
    return tag.strip(), ""


def _clean(text: str) -> str:
    return text.strip().strip("\"“”").strip().removeprefix("- ").strip().rstrip(".").strip()


def _for_history_tag(text: str) -> str:
    """The file for a finding a model tagged with the history's own tag: facts about the
    user go to USER.md, everything else to MEMORY.md."""
    first = text.split(maxsplit=1)[0].lower() if text.split() else ""
    return USER_MD if first in ("user", "user's", "i", "i'm", "my") else MEMORY_MD


def parse_finding(line: str) -> Finding | None:
    """The :class:`Finding` of one answer line; ``None`` for a skip, prose or a line with
    nothing to apply."""
    m = _TAGGED.match(line)
    if m is None:
        return None
    tag, heading = _split_tag(m.group(1))
    body = _HISTORY_TAG_IN_BODY.sub("", m.group(2).strip())
    upper = tag.upper().replace("_", "-").replace(" ", "-")
    if upper == "SKIP" or upper.startswith("EPHEMERAL") or not body:
        return None
    if upper.endswith("REMOVE"):
        return _removal(upper, body)
    file = _tag_file(upper)
    if file is None:
        if upper not in _HISTORY_TAGS:
            return None
        file = _for_history_tag(body)
    claim, old = split_correction(body, strict=True)
    _, ref = replaces_ref(body)
    text = _clean(claim)
    if not text or _NOTHING.match(text) or _placeholder(body):
        return None
    label = {name: word for word, name in _FILE_WORDS}[file]
    tag_text = f"{label}:{heading}" if heading else label
    return Finding(
        "add", file, text, heading=heading, old=old,
        replaces=ref.text if ref is not None else None, line=f"[{tag_text}] {body}",
    )


def _placeholder(text: str) -> bool:
    """Whether ``text`` is a copy of the prompt's own example line, or an unfilled ``<...>``."""
    return bool(re.fullmatch(r"\W*<[^<>]{1,40}>\W*", text)) or any(same_line(text, p) for p in _PLACEHOLDERS)


def _removal(upper: str, body: str) -> Finding | None:
    m = _REMOVE_BODY.match(body)
    if m is None:
        return None
    text = _clean(m.group("text"))
    if not text or _placeholder(text):
        return None
    named = m.group("file")
    file = _tag_file(named.removesuffix(".md").split("/")[-1]) if named else None
    if file is None and upper != "FILE-REMOVE":
        file = _tag_file(upper.removesuffix("REMOVE"))
    return Finding("remove", file, text, heading=(m.group("heading") or "").strip(), line=f"[{upper}] {body}")


def parse_findings(text: str) -> tuple[list[str], bool]:
    """Finding lines of an analysis answer (normalised), and whether the answer followed the
    format at all (a lone ``[SKIP]`` counts: nothing to do is a valid answer)."""
    findings, any_valid = [], False
    for line in (text or "").splitlines():
        m = _TAGGED.match(line)
        if m is None:
            continue
        tag = _split_tag(m.group(1))[0].upper()
        if tag == "SKIP" or tag.startswith("EPHEMERAL"):
            any_valid = True
            continue
        finding = parse_finding(line)
        if finding is not None:
            any_valid = True
            findings.append(finding.line)
    return list(dict.fromkeys(findings)), any_valid


def parse_rejections(text: str) -> list[tuple[str, str]]:
    """``[SKIP] "<fact>" — reason`` lines: (fact, reason) pairs the model declined."""
    out = []
    for line in (text or "").splitlines():
        m = _REJECT_QUOTED.match(line) or _REJECT.match(line)
        if m is not None:
            out.append((m.group(1).strip(' "“”\''), m.group(2).strip()))
    return out
