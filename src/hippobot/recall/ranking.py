"""How a candidate's evidence becomes one score: the single ranking every front end uses.

``RecallIndex.search`` gathers, for each candidate document, what speaks for it:

* ``words``: its BM25 score divided by the most a document of average length matching each
  query term once would get (the sum of the terms' idf). 0 means no query word, ~1 means
  every word, rare ones included; it can pass 1 for a short text repeating the words.
  Comparable across queries and across the three tables, unlike raw BM25;
* ``meaning``: how far its cosine similarity to the query stands above the similarity of
  the typical document, in standard deviations over all vectors in scope (a z-score, so
  it means the same with any embedding model); ``None`` without vectors;
* ``context``: the best ``meaning`` of the messages just before and after it in the same
  conversation (an answer is often the reply to the question before it);
* ``age_days`` and ``kind``: the recency and kind of the document.

:func:`relevance` turns them into a number between 0 and 1 with a logistic model whose
weights were fitted on conversations 1-5 of LoCoMo (see docs/recall.md): on that data, a
hit of relevance ``p`` held what the question asked for about ``p`` of the time. The
conversations the benchmark reports as held out (6-10) were never used for it. That is
what makes a relevance bar possible: hits below ~0.2 are rarely what was asked for.
Ranking is by relevance, so the bar and the order never disagree.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

__all__ = [
    "FEATURES",
    "HYBRID",
    "KEYWORD",
    "Evidence",
    "Weights",
    "features",
    "logit",
    "recency",
    "relevance",
]


@dataclass(frozen=True, slots=True)
class Weights:
    """Coefficients of the logistic model (fitted on LoCoMo 1-5; see the module doc)."""

    bias: float
    words: float
    meaning: float = 0.0
    context: float = 0.0
    prev_words: float = 0.0
    next_words: float = 0.0
    length: float = 0.0
    asks: float = 0.0
    recency: float = 0.0  # times 1 / (1 + age_days / RECENCY_TAU_DAYS): 1 today, 0.5 a month ago
    memory: float = 0.0  # added for memory-file documents (the current, curated truth)
    history: float = 0.0  # added for history summaries


RECENCY_TAU_DAYS = 30.0
# Keyword search alone, and hybrid search: fitted by `python -m benchmarks.locomo.tune` on
# LoCoMo conversations 1-5 (docs/recall.md). LoCoMo has no memory files or history entries,
# so ``memory`` and ``history`` are set by hand (a small lead for the curated truth), and so
# is ``recency`` (fitted ~0 there; a small lead for what is recent among equals).
KEYWORD = Weights(
    bias=-6.405, words=3.247, prev_words=1.088, next_words=2.498, length=1.556, asks=-0.48,
    recency=0.1, memory=0.3, history=0.15,
)  # fmt: skip
HYBRID = Weights(
    bias=-7.526, words=3.144, meaning=1.03, context=0.403, prev_words=0.412, next_words=1.971,
    length=0.941, asks=-1.243, recency=0.1, memory=0.3, history=0.15,
)  # fmt: skip

@dataclass(slots=True)
class Evidence:
    """What speaks for one candidate document (see the module doc)."""

    doc_id: int
    kind: str
    words: float = 0.0
    bm25: float | None = None  # raw FTS5 BM25 (higher is better), for --explain
    bm25_rank: int | None = None
    meaning: float | None = None
    similarity: float | None = None  # raw cosine similarity, for --explain
    vector_rank: int | None = None
    context: float | None = None
    prev_words: float = 0.0  # ``words`` of the message just before, same conversation
    next_words: float = 0.0  # ... and just after
    age_days: float | None = None
    chars: int = 0  # length of the text
    asks: bool = False  # the text ends with a question mark
    via_neighbour: bool = False  # a candidate only because a neighbour matched
    score: float = 0.0


def recency(age_days: float | None) -> float:
    """1 for a document from today, 0.5 a month old, ~0.08 a year old; 0 if undated."""
    if age_days is None:
        return 0.0
    return 1.0 / (1.0 + max(0.0, age_days) / RECENCY_TAU_DAYS)


FEATURES = (
    "words", "meaning", "context", "prev_words", "next_words", "length", "asks", "recency",
    "memory", "history",
)  # fmt: skip


def length(chars: int) -> float:
    """0 for an empty text, 0.5 at ~75 characters, 1 from ~375: a short remark ("Wow, did
    you?") rarely holds a fact, yet BM25 favours short texts that repeat a word."""
    return min(1.0, math.log2(1.0 + chars / 25.0) / 4.0)


def features(ev: Evidence) -> tuple[float, ...]:
    """The inputs of the model, in the order of :data:`FEATURES` (weights: same names)."""
    return (
        min(ev.words, 1.0),
        max(ev.meaning, 0.0) if ev.meaning is not None else 0.0,
        max(ev.context, 0.0) if ev.context is not None else 0.0,
        min(ev.prev_words, 1.0),
        min(ev.next_words, 1.0),
        length(ev.chars),
        1.0 if ev.asks else 0.0,
        recency(0.0 if ev.kind == "memory" else ev.age_days),
        1.0 if ev.kind == "memory" else 0.0,
        1.0 if ev.kind == "history" else 0.0,
    )


@functools.cache
def _coefficients(w: Weights) -> tuple[float, ...]:
    return tuple(getattr(w, name) for name in FEATURES)


def logit(ev: Evidence, w: Weights) -> float:
    total = w.bias
    for c, x in zip(_coefficients(w), features(ev), strict=True):
        total += c * x
    return total


def relevance(ev: Evidence, w: Weights) -> float:
    """The calibrated score in (0, 1): the estimated chance this hit is what was asked for."""
    z = logit(ev, w)
    return 1.0 / (1.0 + math.exp(-z)) if z > -30 else 0.0
