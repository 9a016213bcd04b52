"""How a candidate's evidence becomes one score: the single ranking every front end uses.

``RecallIndex.search`` gathers, for each candidate document, what speaks for it:

* ``words``: its BM25 score divided by the most a document of average length matching each
  query term once would get (the sum of the terms' idf). 0 means no query word, ~1 means
  every word, rare ones included; it can pass 1 for a short text repeating the words.
  Comparable across queries and across the three tables, unlike raw BM25;
* ``meaning``: how far its cosine similarity to the query stands above the similarity of
  the typical document, in standard deviations over all vectors in scope (a z-score, so
  it means the same with any embedding model); ``None`` without vectors;
* ``cover``: the share of the query's words (weighted by idf, as BM25 weighs them) that
  the text holds, without BM25's length normalisation; ``cover_near`` the same for the text
  and the messages just before and after it in the same conversation, ``cover_wide`` for
  the three before and after. An answer is often the reply to the message that matched the
  question ("Yes, last Saturday!"), and a question's words are often spread over a few
  turns;
* ``context``: the best ``meaning`` of the two messages before and after it;
* ``speaker``: the query names who speaks in it (a transcript line, ``Name: text``);
* ``dated``: it was written within a period the query names ("on 8 May 2023", "last
  week"; :mod:`~hippobot.recall.periods`);
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
    cover: float = 0.0
    cover_near: float = 0.0
    cover_wide: float = 0.0
    length: float = 0.0
    asks: float = 0.0
    speaker: float = 0.0
    dated: float = 0.0
    recency: float = 0.0  # times 1 / (1 + age_days / RECENCY_TAU_DAYS): 1 today, 0.5 a month ago
    memory: float = 0.0  # added for memory-file documents (the current, curated truth)
    history: float = 0.0  # added for history summaries


RECENCY_TAU_DAYS = 30.0
# Keyword search alone, and hybrid search: fitted by `python -m benchmarks.locomo.tune` on
# LoCoMo conversations 1-5 (docs/recall.md: a listwise fit, a search on R@5 from there,
# then Platt scaling), with a neighbour's meaning weighing at most 0.8 of a message's own
# (so of two neighbours the closer in meaning ranks first). Hybrid ``words`` came out 0:
# with vectors, ``cover`` says what BM25 said. LoCoMo has no memory files or history entries, so ``memory`` and
# ``history`` are set by hand (a small lead for the curated truth), and so is ``recency``
# (fitted ~0 there; a small lead for what is recent among equals).
KEYWORD = Weights(
    bias=-7.852, words=0.484, cover=0.468, cover_near=2.306, cover_wide=1.97, length=0.395,
    speaker=1.263, dated=2.639, recency=0.1, memory=0.3, history=0.15,
)  # fmt: skip
HYBRID = Weights(
    bias=-9.616, words=0.0, meaning=0.79, context=0.315, cover=0.91, cover_near=1.391,
    cover_wide=1.551, length=0.732, asks=-0.509, speaker=1.693, dated=2.736, recency=0.1,
    memory=0.3, history=0.15,
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
    context: float | None = None  # best ``meaning`` within two messages either side
    cover: float = 0.0  # idf-weighted share of the query's words in the text
    cover_near: float = 0.0  # ... in the text and the messages just before and after
    cover_wide: float = 0.0  # ... and within three messages either side
    age_days: float | None = None
    chars: int = 0  # length of the text
    asks: bool = False  # the text ends with a question mark
    speaker: bool = False  # the query names who speaks in it
    dated: bool = False  # written within a period the query names
    via_neighbour: bool = False  # a candidate only because a neighbour matched
    score: float = 0.0


def recency(age_days: float | None) -> float:
    """1 for a document from today, 0.5 a month old, ~0.08 a year old; 0 if undated."""
    if age_days is None:
        return 0.0
    return 1.0 / (1.0 + max(0.0, age_days) / RECENCY_TAU_DAYS)


FEATURES = (
    "words", "meaning", "context", "cover", "cover_near", "cover_wide", "length", "asks",
    "speaker", "dated", "recency", "memory", "history",
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
        ev.cover,
        ev.cover_near,
        ev.cover_wide,
        length(ev.chars),
        1.0 if ev.asks else 0.0,
        1.0 if ev.speaker else 0.0,
        1.0 if ev.dated else 0.0,
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
