"""Which pending archive entries the prompt's ``# Recent History`` shows (SPEC 4.2, item 6).

Recent History holds what was archived but is not yet in SOUL.md, USER.md or MEMORY.md, so
it is the only place the model sees those facts. It has a bounded share of the budget and
spends it on what matters:

1. This session's entries, whole; other sessions' entries only by their durable lines
   (``[permanent]``, ``[durable]``, ``[correction]``), so what the user said in one chat
   reaches every chat. ``include_other_sessions=False`` keeps chats apart.
2. A line that a later ``[correction]`` replaces ("moved to Osaka, not Tokyo" replaces
   "lives in Tokyo") is left out: the model sees only the current fact.
3. When the share is exceeded, ``[ephemeral]`` lines, untagged lines and the bodies of
   ``[RAW]`` dumps go first, oldest entries first; the newest entry of this session stays
   whole as long as it fits.
4. Only if the durable lines alone do not fit are the oldest of them left out; the result
   says how many (``dropped_durable``), and the caller must let Dream file them (see
   :mod:`hippobot.lifecycle.autodream`): they are still in the archive and searchable.

Pure and memoised on its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from hippobot.context.runtime import fence_untrusted
from hippobot.context.tokens import count_text
from hippobot.memory.facts import fact_lines, mentions_old_value, split_correction

__all__ = ["RecentEntry", "RecentSelection", "render_entry", "select_recent_history"]

_HEADER_TOKENS = 24  # "# Recent History" and a note line


def render_entry(timestamp: str, content: str) -> str:
    """One entry as the prompt shows it: a list item whose continuation lines are indented
    (so a multi-line entry stays one item), scaffolding look-alikes fenced. The selection
    below costs entries in exactly this form, so what it keeps is what fits."""
    return f"- [{timestamp}] " + fence_untrusted(content.strip()).replace("\n", "\n  ")


def _prefix_tokens(timestamp: str) -> int:
    return count_text(render_entry(timestamp, ""))


def _line_tokens(raw: str) -> int:
    # the line as rendered: indented, fenced, and the newline that ends it
    return count_text("  " + fence_untrusted(raw.strip())) + 1


@dataclass(frozen=True, slots=True)
class RecentEntry:
    cursor: int
    timestamp: str
    content: str
    session_key: str | None = None


@dataclass(frozen=True, slots=True)
class RecentSelection:
    entries: tuple[RecentEntry, ...]
    dropped_durable: int = 0  # durable lines that did not fit: Dream must run
    dropped_other: int = 0  # ephemeral or untagged lines left out
    durable_tokens: int = 0  # what the durable lines of the candidates cost

    @property
    def note(self) -> str:
        if not self.dropped_durable:
            return ""
        return (
            f"({self.dropped_durable} older archived facts are not shown here; Dream is filing "
            "them into the memory files, and memory_search finds them meanwhile)"
        )


@dataclass(slots=True)
class _Line:
    text: str
    durable: bool
    tokens: int


@dataclass(slots=True)
class _Candidate:
    cursor: int
    timestamp: str
    session_key: str | None
    lines: list[_Line]
    own: bool
    prefix: int = 0  # tokens of the "- [timestamp] " that opens the rendered entry


def _candidate(entry: RecentEntry, own: bool) -> _Candidate | None:
    content = entry.content.strip()
    if content.startswith("[RAW]"):
        head, _, _ = content.partition("\n")
        # the dump stays in the archive; its header says where the messages are
        lines = [_Line(head, False, _line_tokens(head))]
        if not own:
            return None
        return _Candidate(
            entry.cursor, entry.timestamp, entry.session_key, lines, own, _prefix_tokens(entry.timestamp)
        )
    out: list[_Line] = []
    for raw in content.splitlines():
        if not raw.strip():
            continue
        facts = fact_lines(raw)
        durable = bool(facts) and facts[0].durable
        if not own and not durable:
            continue
        out.append(_Line(raw.strip(), durable, _line_tokens(raw)))
    if not out:
        return None
    return _Candidate(
        entry.cursor, entry.timestamp, entry.session_key, out, own, _prefix_tokens(entry.timestamp)
    )


def _drop_superseded(cands: list[_Candidate]) -> None:
    """Remove durable lines a later correction replaces."""
    for i, cand in enumerate(cands):
        for line in cand.lines:
            for fact in fact_lines(line.text):
                if fact.kind != "correction":
                    continue
                new, old = split_correction(fact.text)
                if old is None:
                    continue
                for earlier in cands[: i + 1]:
                    earlier.lines = [
                        ln for ln in earlier.lines
                        if ln is line or not mentions_old_value(ln.text, old, new)
                    ]


def _cost(cands: list[_Candidate]) -> int:
    return _HEADER_TOKENS + sum(c.prefix + sum(ln.tokens for ln in c.lines) for c in cands if c.lines)


def select_recent_history(
    entries: Sequence[RecentEntry],
    *,
    session_key: str,
    include_other_sessions: bool,
    max_tokens: int,
    max_entries: int = 50,
) -> RecentSelection:
    """The entries (trimmed to the lines kept) Recent History shows, oldest first."""
    return _select(tuple(entries), session_key, include_other_sessions, max_tokens, max_entries)


@lru_cache(maxsize=32)
def _select(
    entries: tuple[RecentEntry, ...], key: str, others: bool, max_tokens: int, max_entries: int
) -> RecentSelection:
    cands: list[_Candidate] = []
    for e in entries:
        own = e.session_key == key
        if not own and not others:
            continue
        cand = _candidate(e, own)
        if cand is not None:
            cands.append(cand)
    _drop_superseded(cands)
    cands = [c for c in cands if c.lines]
    durable_tokens = sum(ln.tokens for c in cands for ln in c.lines if ln.durable)
    dropped_other = dropped_durable = 0
    newest_own = max((i for i, c in enumerate(cands) if c.own), default=-1)

    def trim(c: _Candidate) -> None:
        nonlocal dropped_other
        kept = [ln for ln in c.lines if ln.durable]
        dropped_other += len(c.lines) - len(kept)
        c.lines = kept

    # entries beyond the count limit keep only their durable lines
    for c in cands[: max(0, len(cands) - max_entries)]:
        trim(c)
    # over the share: routine lines go first, oldest first, the newest own entry last
    order = [i for i in range(len(cands)) if i != newest_own] + [newest_own]
    for i in order:
        if i < 0 or _cost(cands) <= max_tokens:
            break
        trim(cands[i])
    # still over: the oldest durable lines (Dream is due)
    for c in cands:
        while c.lines and _cost(cands) > max_tokens and sum(len(x.lines) for x in cands) > 1:
            c.lines.pop(0)
            dropped_durable += 1
        if _cost(cands) <= max_tokens:
            break
    kept = tuple(
        RecentEntry(c.cursor, c.timestamp, "\n".join(ln.text for ln in c.lines), c.session_key)
        for c in cands
        if c.lines
    )
    return RecentSelection(kept, dropped_durable, dropped_other, durable_tokens)
