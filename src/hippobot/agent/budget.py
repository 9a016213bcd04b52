"""Token budget arithmetic, in one place (SPEC 4.3)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SAFETY_MARGIN", "Budget"]

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
