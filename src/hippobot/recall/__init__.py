"""Recall: full-text search over everything the agent remembers (SPEC 4.7).

A derived SQLite FTS5 index under ``workspace/.hippobot/`` covers history entries, every
session message and the memory Markdown files. The files stay the truth; the index can be
deleted at any time and rebuilds itself. See ``docs/recall.md``.

Typical use::

    index = RecallIndex(workspace)
    index.sync()                                   # after each turn (cheap when idle)
    hits = index.search("dark mode", k=5)          # best first, each with a citation
    print(index.get(hits[0].citation, around=3))   # the full entry / messages around it
"""

from __future__ import annotations

from .index import RecallIndex
from .query import Citation, Hit, RecallError, Scope, parse_citation
from .sources import SyncStats
from .tools import format_hits, hits_to_json, recall_tools

__all__ = [
    "Citation",
    "Hit",
    "RecallError",
    "RecallIndex",
    "Scope",
    "SyncStats",
    "format_hits",
    "hits_to_json",
    "parse_citation",
    "recall_tools",
]
