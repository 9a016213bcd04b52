"""Where a consolidation may cut a session, and which turn it must leave alone.

Pure functions over the message list, plus :class:`TurnGuard`, the one answer to "may the
last turn of this session still be running?" that every step of an archive asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from hippobot.context import tokens
from hippobot.messages import Message

__all__ = ["TurnGuard", "legal_boundaries", "open_turn_start", "pick_boundary"]


def open_turn_start(messages: Sequence[Message], start: int) -> int | None:
    """Where the last turn begins when it is unfinished (not yet ended by a reply without
    tool calls), else ``None``."""
    if len(messages) <= start:
        return None
    last = messages[-1]
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        return None
    for index in range(len(messages) - 1, start - 1, -1):
        if messages[index].get("role") == "user":
            return index
    return start


@dataclass(frozen=True, slots=True)
class TurnGuard:
    """Whether the session's last turn may still be running while messages are archived.

    A caller holding the session's turn lock (before a turn, ``/new``) knows no turn runs:
    an unfinished last turn was interrupted, and may be archived and replayed like any
    other (:data:`TurnGuard.HELD`). Work done beside the turns (a background consolidation,
    the idle schedule, a retry) does not know: an unfinished last turn may be running here
    or in another process, its tool results still to come (:data:`TurnGuard.BESIDE`), so it
    is neither cut nor replayed with stand-ins for those results.
    """

    turn_lock_held: bool
    HELD: ClassVar[TurnGuard]
    BESIDE: ClassVar[TurnGuard]

    def running_from(self, messages: Sequence[Message], start: int = 0) -> int | None:
        """Index where a turn that may still be running begins (``None``: none can be)."""
        return None if self.turn_lock_held else open_turn_start(messages, start)


TurnGuard.HELD = TurnGuard(True)
TurnGuard.BESIDE = TurnGuard(False)


def legal_boundaries(messages: Sequence[Message], start: int) -> list[tuple[int, bool]]:
    """Indices ``b`` (start < b <= len) where ``messages[start:b]`` can be archived.

    A cut may not separate tool results from their call, so ``messages[b]`` must not be a tool
    result. Each boundary is flagged ``True`` when it is a user-turn boundary (preferred).
    """
    out: list[tuple[int, bool]] = []
    n = len(messages)
    for b in range(start + 1, n + 1):
        if b == n:
            out.append((b, True))
        elif messages[b].get("role") != "tool":
            out.append((b, messages[b].get("role") == "user"))
    return out


def pick_boundary(
    messages: Sequence[Message], start: int, to_remove: int, guard: TurnGuard
) -> int | None:
    """The end of the oldest slice from ``start`` that frees at least ``to_remove`` tokens,
    preferably at a user-turn boundary; ``None`` when no legal cut exists."""
    bounds = legal_boundaries(messages, start)
    # Never archive the user's newest message before it has been answered...
    if messages and messages[-1].get("role") == "user":
        bounds = [(b, u) for b, u in bounds if b < len(messages)]
    # ...nor a turn that may still be running: its tool results would land after the cut.
    running = guard.running_from(messages, start)
    if running is not None:
        bounds = [(b, u) for b, u in bounds if b <= running]
    if not bounds:
        return None
    removed, i = 0, start
    first_any: int | None = None
    for b, is_user in bounds:
        removed += tokens.count_messages(messages[i:b])
        i = b
        if removed >= to_remove:
            if is_user:
                return b
            if first_any is None:
                first_any = b
    # No user boundary far enough: a single tool-heavy turn may still be cut at an
    # assistant boundary; otherwise take the last user boundary we have.
    if first_any is not None:
        return first_any
    user_bounds = [b for b, u in bounds if u]
    return user_bounds[-1] if user_bounds else bounds[-1][0]
