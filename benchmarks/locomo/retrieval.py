"""LoCoMo retrieval: does a search put the turn that holds the answer in front of the model?

For every question of categories 1-4, each retriever returns its ten best documents; a
question counts as found at ``k`` when one of its evidence turns is among the first ``k``
(R@k), and ``ev@10`` is the share of all evidence turns found in the first ten. Four
retrievers over the same documents, in the same run:

* ``hippobot keyword``: :meth:`RecallIndex.search` without an embedder, on the workspace as
  ``hippobot memory search`` sees it (templates included: a template hit is a miss);
* ``hippobot hybrid``: the same with the embedder (vectors filled by the index itself);
* ``plain BM25``: textbook Okapi BM25 (k1 1.5, b 0.75, rank_bm25's idf floor) over
  lower-cased words minus 40 stop words, turns only;
* ``plain vector``: cosine similarity of the same embedder's vectors, turns only.

Vectors are cached between runs (:class:`CachedEmbedder`, keyed by model and text), so a
second run embeds nothing. An embedder that fails mid-run leaves hybrid search on
keywords (as hippobot does) and the report says for how many questions.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import percentile
from hippobot.recall import RecallIndex
from hippobot.recall.embeddings import Embedder, EmbeddingsUnavailableError

from .dataset import CATEGORIES, Conversation, Question
from .ingest import ingest

__all__ = [
    "KS",
    "RETRIEVERS",
    "CachedEmbedder",
    "GroupResult",
    "PlainBM25",
    "evaluate",
    "tokens",
]

KS = (1, 5, 10)
DEPTH = max(KS)
RETRIEVERS = ("plain BM25", "plain vector", "hippobot keyword", "hippobot hybrid")
EVAL_CATEGORIES = (1, 2, 3, 4)

# The reference tokenizer: lower-case words minus these 40 stop words.
_STOP = frozenset(
    re.findall(
        r"\w+",
        """a an the and or but if of to in on at by for with from as is are was were be been
        do does did have has had i you it we they what when where who which how that this""",
    )
)
_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class PlainBM25:
    """Okapi BM25 as in ``rank_bm25.BM25Okapi`` (negative idf floored at 0.25 × mean idf)."""

    def __init__(self, docs: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tf = [Counter(tokens(d)) for d in docs]
        self.len = np.array([sum(c.values()) for c in self.tf], dtype=np.float64)
        self.avg = float(self.len.mean()) if len(docs) else 1.0
        df: Counter[str] = Counter()
        for c in self.tf:
            df.update(c.keys())
        n = len(docs)
        idf = {t: math.log(n - f + 0.5) - math.log(f + 0.5) for t, f in df.items()}
        floor = 0.25 * (sum(idf.values()) / len(idf)) if idf else 0.0
        self.idf = {t: (v if v >= 0 else floor) for t, v in idf.items()}

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(len(self.tf))
        norm = self.k1 * (1 - self.b + self.b * self.len / self.avg)
        for term in tokens(query):
            idf = self.idf.get(term)
            if idf is None:
                continue
            f = np.array([c.get(term, 0) for c in self.tf], dtype=np.float64)
            out += idf * f * (self.k1 + 1) / (f + norm)
        return out


class CachedEmbedder:
    """An embedder whose vectors are kept in ``<dir>/<model>.npz`` between runs.

    Same ``name`` and ``dim`` as the model it wraps, so the vectors hippobot stores are
    that model's. ``seconds`` and ``embedded`` count only the work the model really did.
    """

    def __init__(self, inner: Embedder, directory: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.path = directory / (re.sub(r"[^\w.-]+", "_", inner.name) + ".npz")
        self._vectors: dict[str, np.ndarray] = {}
        self._dirty = False
        self.seconds = 0.0
        self.embedded = 0
        self.hits = 0
        if self.path.exists():
            with np.load(self.path) as data:
                keys, mat = data["keys"], data["vectors"]
            self._vectors = {str(k): mat[i] for i, k in enumerate(keys)}

    @staticmethod
    def _key(kind: str, text: str) -> str:
        return hashlib.sha1(f"{kind}\0{text}".encode()).hexdigest()

    def _get(self, kind: str, texts: Sequence[str], embed: Callable[[list[str]], Any]) -> np.ndarray:
        keys = [self._key(kind, t) for t in texts]
        missing = [i for i, key in enumerate(keys) if key not in self._vectors]
        self.hits += len(texts) - len(missing)
        if missing:
            started = time.perf_counter()
            fresh = np.asarray(embed([texts[i] for i in missing]), dtype=np.float32)
            self.seconds += time.perf_counter() - started
            self.embedded += len(missing)
            for i, vec in zip(missing, fresh.reshape(len(missing), -1), strict=True):
                self._vectors[keys[i]] = vec
            self._dirty = True
        return np.stack([self._vectors[key] for key in keys])

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._get("passage", list(texts), self.inner.embed_documents)

    def embed_query(self, text: str) -> np.ndarray:
        return self._get("query", [text], lambda t: self.inner.embed_query(t[0]).reshape(1, -1))[0]

    def save(self) -> None:
        if not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._vectors))
        mat = np.stack(list(self._vectors.values())) if keys.size else np.zeros((0, self.dim))
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=mat.astype(np.float32))
        tmp.replace(self.path)
        self._dirty = False


@dataclass
class _Tally:
    """Hits of one retriever over a set of questions."""

    questions: int = 0
    found: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))
    evidence: int = 0
    evidence_found: int = 0  # in the first DEPTH

    def add(self, ranked: Sequence[str | None], question: Question) -> None:
        gold = set(question.evidence)
        self.questions += 1
        for k in KS:
            if gold & set(ranked[:k]):
                self.found[k] += 1
        self.evidence += len(gold)
        self.evidence_found += len(gold & set(ranked[:DEPTH]))

    def summary(self) -> dict[str, float | int]:
        n = max(self.questions, 1)
        out: dict[str, float | int] = {f"R@{k}": round(self.found[k] / n, 4) for k in KS}
        out["ev@10"] = round(self.evidence_found / max(self.evidence, 1), 4)
        out["questions"] = self.questions
        return out


@dataclass
class GroupResult:
    """Everything measured over one selection of conversations."""

    label: str
    conversations: list[str]
    turns: int = 0
    skipped_no_evidence: dict[str, int] = field(default_factory=dict)
    tallies: dict[str, dict[str, _Tally]] = field(default_factory=dict)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    index_seconds: float = 0.0
    embed_seconds: float = 0.0
    embedded: int = 0
    from_cache: int = 0
    fallbacks: int = 0  # hybrid searches that answered by keywords (embedder failed)
    vector_missing: int = 0  # questions the plain vector search could not answer
    notes: list[str] = field(default_factory=list)

    def tally(self, retriever: str, category: int) -> tuple[_Tally, _Tally]:
        per = self.tallies.setdefault(retriever, {})
        return per.setdefault("all", _Tally()), per.setdefault(CATEGORIES[category], _Tally())

    def to_json(self) -> dict[str, Any]:
        def pct(values: list[float], q: float) -> float | None:
            return round(percentile(values, q), 2) if values else None

        return {
            "label": self.label,
            "conversations": self.conversations,
            "turns": self.turns,
            "questions": self.tallies.get("plain BM25", {}).get("all", _Tally()).questions,
            "skipped_no_evidence": self.skipped_no_evidence,
            "retrievers": {
                name: {part: t.summary() for part, t in parts.items()}
                for name, parts in self.tallies.items()
            },
            "latency_ms": {
                name: {"p50": pct(v, 50), "p95": pct(v, 95), "n": len(v)}
                for name, v in self.latency_ms.items()
            },
            "index_seconds": round(self.index_seconds, 3),
            "embedding": {
                "seconds": round(self.embed_seconds, 2),
                "embedded": self.embedded,
                "from_cache": self.from_cache,
            },
            "hybrid_keyword_fallbacks": self.fallbacks,
            "vector_missing": self.vector_missing,
            "notes": self.notes,
        }


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def _top(scores: np.ndarray, ids: list[str]) -> list[str | None]:
    order = np.argsort(-scores, kind="stable")[:DEPTH]
    return [ids[i] for i in order]


def evaluate(
    label: str,
    conversations: Sequence[Conversation],
    work: Path,
    embedder: CachedEmbedder | None,
    *,
    latency_sample: int = 100,
    warn: Callable[[str], None] = print,
    progress: Callable[[str], None] = lambda _: None,
) -> GroupResult:
    """Ingest each conversation into its own workspace under ``work`` and search every
    question of categories 1-4 with each retriever."""
    result = GroupResult(label, [c.sample_id for c in conversations])
    result.tallies = {name: {} for name in RETRIEVERS}
    semantic_down: str | None = None if embedder is not None else "no embedder"
    latency_left = latency_sample
    for conv in conversations:
        for cat, n in conv.no_evidence.items():
            name = CATEGORIES.get(cat, str(cat))
            result.skipped_no_evidence[name] = result.skipped_no_evidence.get(name, 0) + n
        questions = [q for q in conv.questions if q.category in EVAL_CATEGORIES]
        progress(f"{conv.sample_id}: {len(conv.turns)} turns, {len(questions)} questions")
        data = ingest(conv, work / conv.sample_id)
        result.turns += len(data.docs)
        # The user asks the day after the last session, so recency weighs as in real use.
        now = (max(s.started for s in conv.sessions) + timedelta(days=1)).timestamp()
        keyword = RecallIndex(data.workspace, auto_sync=False)
        result.index_seconds += keyword.sync().seconds
        doc_ids = [d for d, _ in data.docs]
        bm25 = PlainBM25([t for _, t in data.docs])

        hybrid: RecallIndex | None = None
        doc_matrix: np.ndarray | None = None
        if embedder is not None and semantic_down is None:
            hybrid = RecallIndex(data.workspace, auto_sync=False, embedder=embedder)
            before_n, before_hits = embedder.embedded, embedder.hits
            started = time.perf_counter()
            hybrid.embed_pending(max_docs=10**9, batch_size=64)
            result.embed_seconds += time.perf_counter() - started
            warning = hybrid.take_semantic_warning()
            try:
                doc_matrix = _unit(embedder.embed_documents([t for _, t in data.docs]))
            except EmbeddingsUnavailableError as exc:
                warning = warning or str(exc)
            result.embedded += embedder.embedded - before_n
            result.from_cache += embedder.hits - before_hits
            embedder.save()
            if warning:
                semantic_down = warning
                warn(f"warning: {conv.sample_id}: {warning}; hybrid search falls back to keywords")

        for question in questions:
            pairs = [result.tally(name, question.category) for name in RETRIEVERS]
            ranked_bm25 = _top(bm25.scores(question.text), list(doc_ids))
            started = time.perf_counter()
            hits = keyword.search(question.text, k=DEPTH, now=now)
            result.latency_ms.setdefault("hippobot keyword", []).append(
                (time.perf_counter() - started) * 1000
            )
            ranked_kw = [data.dia_id(h.citation) for h in hits]
            ranked_vec: list[str | None] = []
            ranked_hy = ranked_kw
            if hybrid is not None and semantic_down is None:
                try:  # so that the timed search finds the query vector in the cache
                    embedder.embed_query(question.text)
                except EmbeddingsUnavailableError:
                    pass  # the search below meets the same failure and falls back
                started = time.perf_counter()
                hits = hybrid.search(question.text, k=DEPTH, now=now)
                result.latency_ms.setdefault("hippobot hybrid, query vector cached", []).append(
                    (time.perf_counter() - started) * 1000
                )
                warning = hybrid.take_semantic_warning()
                if warning:
                    semantic_down = warning
                    warn(f"warning: {warning}; hybrid search falls back to keywords from here on")
                else:
                    ranked_hy = [data.dia_id(h.citation) for h in hits]
                    if doc_matrix is not None and embedder is not None:
                        qvec = _unit(embedder.embed_query(question.text))
                        ranked_vec = _top(doc_matrix @ qvec, list(doc_ids))
            if semantic_down is not None and embedder is not None:
                result.fallbacks += 1
            if not ranked_vec and embedder is not None:
                result.vector_missing += 1
            rankings = (ranked_bm25, ranked_vec, ranked_kw, ranked_hy)
            for name, (total, per_cat), ranked in zip(RETRIEVERS, pairs, rankings, strict=True):
                if embedder is None and name in ("plain vector", "hippobot hybrid"):
                    continue  # not run at all (said in the notes)
                total.add(ranked, question)
                per_cat.add(ranked, question)

        if embedder is not None:
            embedder.save()
        # Latency with vectors, query embedding included: the model itself, not the cache.
        if hybrid is not None and embedder is not None and semantic_down is None and latency_left > 0:
            live = RecallIndex(data.workspace, auto_sync=False, embedder=embedder.inner)
            share = max(1, latency_sample // len(conversations))
            for question in questions[: min(share, latency_left)]:
                started = time.perf_counter()
                live.search(question.text, k=DEPTH, now=now)
                result.latency_ms.setdefault("hippobot hybrid", []).append(
                    (time.perf_counter() - started) * 1000
                )
                latency_left -= 1
            if live.take_semantic_warning():
                result.notes.append("hybrid latency: the embedder failed during the timing")
            live.close()
        keyword.close()
        if hybrid is not None:
            hybrid.close()
    if embedder is None:
        result.notes.append("no embedder: hybrid is keyword search, plain vector not run")
    elif semantic_down is not None:
        result.notes.append(
            f"embedder failed ({semantic_down}): hybrid answered by keywords for "
            f"{result.fallbacks} questions, plain vector missing for {result.vector_missing}"
        )
    return result
