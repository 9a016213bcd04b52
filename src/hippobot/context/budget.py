"""Token budget arithmetic, in one place (SPEC 4.3).

The context window is split as::

    window = reply reserve + safety margin + input budget
    input  = fixed prompt + memory files + Recent History (bounded share) + conversation

* The **safety margin** scales with the window (``window / 16``, 64 to 1,024 tokens): a
  fixed 1,024 would eat a quarter of a 4,096-token window.
* The **reply reserve** is ``maxTokens``, unless that would leave the prompt less than a
  quarter of the window; then a quarter of the window is reserved.
* **Recent History** may use at most :data:`HISTORY_SHARE` of the input budget (and never
  more than 8,000 tokens).
* Consolidation thresholds apply to the part of the budget the conversation can use (what
  the system prompt and tool schemas leave): it starts at ``threshold`` of that room and
  archives down to ``ratio`` of it, but frees at least 2,048 tokens (half the room in a
  small window), so the next consolidation is several turns away even in 4,096 tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hippobot.context import tokens
from hippobot.errors import ConfigError
from hippobot.session.model import Session

__all__ = [
    "COMPACT_WINDOW",
    "HISTORY_SHARE",
    "MIN_CONVERSATION_TOKENS",
    "SAFETY_MARGIN",
    "Budget",
    "BudgetSplit",
    "check_window",
    "compact_prompt",
    "safety_margin",
    "usage_estimate",
]

SAFETY_MARGIN = 1024
"""The largest safety margin (windows of 16k tokens and more)."""
HISTORY_SHARE = 0.15
"""Fraction of the input budget Recent History may use."""
HISTORY_MAX_TOKENS = 8000
MIN_FREED_TOKENS = 2048
"""A consolidation frees at least this much (or half the room in a small window)."""
MIN_CONVERSATION_TOKENS = 512
"""The conversation must have at least this much room besides the fixed prompt."""


COMPACT_WINDOW = 8192
"""Windows up to this size get the compact fixed prompt (:func:`compact_prompt`)."""


def compact_prompt(context_window: int) -> bool:
    """Whether the fixed prompt (identity, tool contract, skills list, tool schemas) is the
    compact one: in a small window every token of it is a token less of conversation, and a
    slow local model reads it again on every request its prompt cache misses."""
    return 0 < context_window <= COMPACT_WINDOW


def safety_margin(context_window: int) -> int:
    """Tokens kept free besides the reply, because estimates are estimates."""
    return min(SAFETY_MARGIN, max(64, context_window // 16))


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
    def margin(self) -> int:
        return safety_margin(self.context_window) if self.enabled else 0

    @property
    def reply_reserve(self) -> int:
        if not self.enabled:
            return self.max_tokens
        if self.context_window - self.max_tokens - self.margin >= self.context_window // 4:
            return self.max_tokens
        return self.context_window // 4

    @property
    def input(self) -> int:
        """Tokens the prompt may use: window − reply reserve − safety margin."""
        if not self.enabled:
            return 0
        return self.context_window - self.reply_reserve - self.margin

    @property
    def history_tokens(self) -> int:
        """Recent History's share of the input budget."""
        if not self.enabled:
            return HISTORY_MAX_TOKENS
        return max(64, min(HISTORY_MAX_TOKENS, int(self.input * HISTORY_SHARE)))

    @property
    def trigger(self) -> int:
        """Prompt size at which background consolidation starts (no overhead known)."""
        return self.trigger_for(0)

    @property
    def target(self) -> int:
        """Prompt size consolidation shrinks to (no overhead known)."""
        return self.target_for(0)

    def _room(self, overhead: int) -> int:
        return max(0, self.input - overhead)

    def trigger_for(self, overhead: int) -> int:
        """Trigger for a prompt whose system prompt and tool schemas take ``overhead``."""
        return overhead + int(self._room(overhead) * self.threshold)

    def target_for(self, overhead: int) -> int:
        """Consolidation target for a prompt with ``overhead`` tokens besides the conversation.

        ``ratio`` of the room, but at least :data:`MIN_FREED_TOKENS` (or half the room, in a
        small window) below the trigger, so the next consolidation is turns away."""
        room = self._room(overhead)
        trigger = int(room * self.threshold)
        gap = max(trigger - int(room * self.ratio), min(room // 2, MIN_FREED_TOKENS))
        return overhead + max(0, trigger - gap)

    def minimum_window(self, fixed: int) -> int:
        """The smallest window (a multiple of 256) in which a fixed prompt of ``fixed``
        tokens leaves Recent History its share and the conversation
        :data:`MIN_CONVERSATION_TOKENS`."""
        window = 256 * max(1, math.ceil(fixed / 256))
        while window < 10_000_000:
            probe = Budget(window, self.max_tokens, self.threshold, self.ratio)
            if probe.input - probe.history_tokens - fixed >= MIN_CONVERSATION_TOKENS:
                return window
            window += 256
        return window


def check_window(budget: Budget, fixed: int, what: str, *, config_path: str | None = None) -> None:
    """A :class:`ConfigError` naming the smallest workable window when ``fixed`` tokens
    (``what``) leave no room for a conversation."""
    if not budget.enabled:
        return
    room = budget.input - budget.history_tokens - fixed
    if room >= MIN_CONVERSATION_TOKENS:
        return
    minimum = budget.minimum_window(fixed)
    raise ConfigError(
        f"agents.defaults.contextWindowTokens is {budget.context_window:,}, too small: the fixed "
        f"prompt ({what}) takes {fixed:,} tokens, leaving {max(0, room):,} for the conversation "
        f"after a {budget.reply_reserve:,}-token reply reserve; set contextWindowTokens to at "
        f"least {minimum:,} (or 0 to turn token budgeting off)",
        path=config_path,
    )


@dataclass(frozen=True, slots=True)
class BudgetSplit:
    """How the window is used now (``hippobot context``)."""

    context_window: int
    reply_reserve: int
    margin: int
    input: int
    fixed: int  # identity, tool contract, skills list, tool schemas
    memory_files: int  # AGENTS/SOUL/USER.md and MEMORY.md as shown
    recent_history: int
    recent_history_share: int
    conversation: int
    conversation_room: int
    trigger: int
    target: int


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
