"""Token budget arithmetic, in one place (SPEC 4.3)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hippobot.context import tokens
from hippobot.session.model import Session

__all__ = ["SAFETY_MARGIN", "Budget", "usage_estimate"]

SAFETY_MARGIN = 1024
"""Tokens kept free besides the reply, because estimates are estimates."""


@dataclass(frozen=True, slots=True)
class Budget:
    context_window: int
    max_tokens: int
    threshold: float = 0.8
    ratio: float = 0.5

    @property
    def enabled(self) -> bool:
        return self.context_window > 0

    @property
    def input(self) -> int:
        """Tokens the prompt may use: window − reply reserve − safety margin."""
        if not self.enabled:
            return 0
        budget = self.context_window - self.max_tokens - SAFETY_MARGIN
        # A tiny window with a large max_tokens still gets a usable prompt budget.
        return budget if budget > 0 else max(128, self.context_window // 2)

    @property
    def trigger(self) -> int:
        """Prompt size at which background consolidation starts."""
        return int(self.input * self.threshold)

    @property
    def target(self) -> int:
        """Prompt size consolidation shrinks to."""
        return int(self.input * self.ratio)


def usage_estimate(
    session: Session,
    count: Callable[[Iterable[Mapping[str, Any]]], int] = tokens.count_messages,
) -> int | None:
    """The size of the next request from the provider's own report on the last one: its
    prompt and completion tokens plus ``count`` of the messages appended since. ``None`` when
    there is no report or it no longer describes the replay (a consolidation or ``/new``
    moved the replay's start): then the caller must count the prompt itself."""
    usage = session.usage
    start = session.replay_start
    if usage is None or usage.messages_at is None or usage.replay_start != start:
        return None
    at = usage.messages_at
    reported = usage.prompt_tokens + usage.completion_tokens
    known = tokens.PromptEstimate(reported, at - start)
    if not known.usable(len(session.messages) - start):
        return None
    return reported + count(session.messages[at:])
