"""hippobot: a personal AI agent whose memory you can read, search, correct and undo."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
