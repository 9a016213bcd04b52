"""Optional semantic recall: a pluggable embedding interface, off by default.

Status: hippobot ships **no** embedding model, and nothing here downloads one. Keyword
search (FTS5) is complete without this module. What exists:

* :class:`Embedder`, the protocol a backend implements (``name``, ``dim``, ``embed``);
* :func:`register_backend` / :func:`load_embedder`: a named backend is created on demand;
  asking for one that is not registered raises :class:`EmbeddingsUnavailableError` with a
  message saying so, never a silent fallback that pretends to be semantic;
* :class:`VectorStore`: vectors of indexed documents in the recall database (table
  ``vectors``), added and deleted together with their documents, searched by cosine
  similarity (numpy when the ``embeddings`` extra is installed, plain Python otherwise);
* :func:`reciprocal_rank_fusion`, which merges the keyword and the semantic ranking.

``RecallIndex(workspace, embedder=...)`` wires these in; with ``embedder=None`` (the
default) no vector is computed or stored.
"""

from __future__ import annotations

import math
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from hippobot.errors import UserError

__all__ = [
    "Embedder",
    "EmbeddingsUnavailableError",
    "VectorStore",
    "available_backends",
    "load_embedder",
    "reciprocal_rank_fusion",
    "register_backend",
]

_BATCH = 64
_RRF_K = 60  # the usual constant: damps the weight of the very first ranks


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors. ``name`` identifies the model: vectors made by
    another model are ignored (and replaced on the next re-index)."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


class EmbeddingsUnavailableError(UserError):
    """Semantic search was requested but no such embedding backend is installed."""


_BACKENDS: dict[str, Callable[[], Embedder]] = {}


def register_backend(name: str, factory: Callable[[], Embedder]) -> None:
    """Make an embedding backend available under ``name`` (for plugins and tests)."""
    _BACKENDS[name] = factory


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def load_embedder(name: str | None) -> Embedder | None:
    """The embedder called ``name``; ``None``, ``""`` or ``"off"`` means keyword search only."""
    if not name or name == "off":
        return None
    factory = _BACKENDS.get(name)
    if factory is None:
        have = ", ".join(available_backends()) or "none"
        raise EmbeddingsUnavailableError(
            f"semantic recall backend {name!r} is not available (registered: {have}); "
            "hippobot ships no embedding model, keyword search works without one"
        )
    return factory()


def _normalised(vec: Sequence[float]) -> array:
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return array("f", (x / norm for x in vec))


class VectorStore:
    """Unit-length float32 vectors keyed by document id, in the recall database's
    ``vectors`` table (created with the index; rows go away with their documents)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def add(self, conn: sqlite3.Connection, items: Sequence[tuple[int, str]]) -> None:
        """Embed and store ``(id, text)`` pairs (inside the caller's transaction)."""
        for start in range(0, len(items), _BATCH):
            batch = items[start : start + _BATCH]
            vectors = self.embedder.embed([text for _, text in batch])
            conn.executemany(
                "INSERT OR REPLACE INTO vectors(id, model, vec) VALUES (?,?,?)",
                (
                    (doc_id, self.embedder.name, _normalised(vec).tobytes())
                    for (doc_id, _), vec in zip(batch, vectors, strict=True)
                ),
            )

    def delete(self, conn: sqlite3.Connection, ids: Iterable[int]) -> None:
        conn.executemany("DELETE FROM vectors WHERE id=?", ((i,) for i in ids))

    def search(
        self, conn: sqlite3.Connection, query: str, *, k: int, id_ranges: Sequence[tuple[int, int]]
    ) -> list[tuple[int, float]]:
        """The ``k`` ids most similar to ``query`` among ids in ``id_ranges`` (brute force)."""
        qvec = _normalised(self.embedder.embed([query])[0])
        scored: list[tuple[float, int]] = []
        for lo, hi in id_ranges:
            rows = conn.execute(
                "SELECT id, vec FROM vectors WHERE id >= ? AND id < ? AND model = ?",
                (lo, hi, self.embedder.name),
            ).fetchall()
            scored.extend(_similarities(qvec, rows))
        scored.sort(reverse=True)
        return [(doc_id, sim) for sim, doc_id in scored[:k]]


def _similarities(qvec: array, rows: list[tuple[int, bytes]]) -> list[tuple[float, int]]:
    if not rows:
        return []
    try:
        import numpy as np
    except ImportError:
        out = []
        for doc_id, blob in rows:
            vec = array("f")
            vec.frombytes(blob)
            out.append((sum(a * b for a, b in zip(qvec, vec, strict=False)), doc_id))
        return out
    matrix = np.frombuffer(b"".join(blob for _, blob in rows), dtype=np.float32)
    sims = matrix.reshape(len(rows), -1) @ np.frombuffer(qvec.tobytes(), dtype=np.float32)
    return [(float(s), doc_id) for s, (doc_id, _) in zip(sims, rows, strict=True)]


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], *, k: int = _RRF_K) -> list[int]:
    """Merge rankings of ids: each id scores ``Σ 1 / (k + rank)``; best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda i: -scores[i])
