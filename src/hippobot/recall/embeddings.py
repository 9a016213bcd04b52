"""Semantic recall: document vectors beside the keyword index, fused with BM25.

Off unless ``recall.embeddings`` is configured; then:

* an :class:`Embedder` (see :mod:`hippobot.recall.embedders`: the offline local model, or an
  OpenAI-compatible ``/v1/embeddings`` endpoint) turns texts into unit vectors;
* :class:`VectorStore` keeps one vector per indexed document in the recall database's
  ``embeddings`` table, tagged with the embedder's ``name``. Vectors are filled in the
  background, newest documents first, in bounded batches (:meth:`VectorStore.fill`), never
  while a document is indexed, so indexing and a turn never wait for a model. Vectors of
  another model, or of the wrong size, are deleted and made again;
* :meth:`VectorStore.scores` gives a query's similarity to every vector in scope, and
  their spread, which :mod:`~hippobot.recall.ranking` turns into evidence.

A search never depends on the vectors being complete: documents without one are still
found by their words.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hippobot.errors import UserError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "EMBEDDINGS_TABLE",
    "Embedder",
    "EmbeddingsUnavailableError",
    "FillStats",
    "VectorScores",
    "VectorStore",
    "embedding_text",
]

_FILL_BATCH = 32
_MAX_EMBED_CHARS = 2_000  # small embedding models read ~512 tokens; the head carries the gist
_PREVIOUS_CHARS = 600  # of the message before, embedded ahead of a session message

EMBEDDINGS_TABLE = """
CREATE TABLE IF NOT EXISTS embeddings(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER NOT NULL UNIQUE,
    model TEXT NOT NULL, vec BLOB NOT NULL)
"""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of size ``dim``.

    ``name`` identifies the model (and its settings): vectors made under another name are
    discarded and made again. Queries and documents may be embedded differently (e5-style
    models prefix them), hence two methods.
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class EmbeddingsUnavailableError(UserError):
    """Semantic search is configured but cannot work here (extra missing, bad provider)."""


@dataclass(slots=True)
class FillStats:
    embedded: int = 0
    pending: int = 0  # documents still without a vector after this call
    dropped: int = 0  # stale vectors (other model, wrong size) removed


def embedding_text(text: str, previous: str | None) -> str:
    """What is embedded for a document: its text, after the end of the message before it
    when it is a session message with one."""
    if not previous:
        return text
    return f"{previous[-_PREVIOUS_CHARS:]}\n{text}"


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


class VectorStore:
    """The ``embeddings`` table of one recall database, and a cached matrix for search.

    Thread-safe through the caller (:class:`~hippobot.recall.index.RecallIndex` holds its
    lock around every call).
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._matrix: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        self._seen: tuple[int, int] = (-1, -1)  # (max seq, row count) the cache reflects
        self._row_of: dict[int, int] | None = None  # id -> row of the matrix, made on use
        self._lock = threading.Lock()

    # --- filling (background) ----------------------------------------------------------

    def pending(self, conn: sqlite3.Connection) -> int:
        row = conn.execute(
            "SELECT count(*) FROM docs d LEFT JOIN embeddings e ON e.id = d.id "
            "WHERE e.id IS NULL"
        ).fetchone()
        return int(row[0])

    def drop_stale(self, conn: sqlite3.Connection) -> int:
        """Delete vectors of another model or of the wrong size (a changed or corrupt store)."""
        size = self.embedder.dim * 4
        cur = conn.execute(
            "DELETE FROM embeddings WHERE model != ? OR length(vec) != ?",
            (self.embedder.name, size),
        )
        return cur.rowcount or 0

    def next_batch(self, conn: sqlite3.Connection, limit: int) -> list[tuple[int, str, str]]:
        """Up to ``limit`` documents without a vector, newest first, as ``(id, text, what
        to embed)``.

        A session message is embedded after the message before it in its conversation
        (its last ``_PREVIOUS_CHARS``): a reply such as "Yes, last Saturday!" means what
        it answers, and that is what a question about it will be close to.
        """
        rows = conn.execute(
            "SELECT d.id, t.text, CASE WHEN f.kind = 'session' THEN ("
            "  SELECT pt.text FROM docs p JOIN texts pt ON pt.id = p.id"
            "  WHERE p.file_id = d.file_id AND p.num < d.num ORDER BY p.num DESC LIMIT 1"
            ") END FROM docs d JOIN texts t ON t.id = d.id JOIN files f ON f.id = d.file_id "
            "LEFT JOIN embeddings e ON e.id = d.id WHERE e.id IS NULL "
            "ORDER BY coalesce(d.ts, 0) DESC, d.id DESC LIMIT ?",
            (limit,),
        )
        return [(int(i), str(t), embedding_text(str(t), p)) for i, t, p in rows]

    def embed(self, batch: Sequence[tuple[int, str, str]]) -> list[tuple[int, str, bytes]]:
        """Vectors for a batch (slow: runs without any database lock held)."""
        texts = [embedded[:_MAX_EMBED_CHARS] or " " for _, _, embedded in batch]
        vectors = _unit_rows(self.embedder.embed_documents(texts))
        if vectors.shape != (len(batch), self.embedder.dim):
            raise EmbeddingsUnavailableError(
                f"embedder {self.embedder.name} returned vectors of shape {vectors.shape}, "
                f"expected ({len(batch)}, {self.embedder.dim})"
            )
        return [
            (doc_id, text, vec.tobytes())
            for (doc_id, text, _), vec in zip(batch, vectors, strict=True)
        ]

    def store(self, conn: sqlite3.Connection, rows: Sequence[tuple[int, str, bytes]]) -> int:
        """Insert vectors whose document still holds the embedded text (inside a transaction).

        A document re-indexed meanwhile may have reused the id for other text; its vector
        would describe the wrong words, so it is skipped and made on the next fill.
        """
        stored = 0
        for doc_id, text, blob in rows:
            cur = conn.execute(
                "INSERT OR REPLACE INTO embeddings(id, model, vec) "
                "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM texts WHERE id = ? AND text = ?)",
                (doc_id, self.embedder.name, blob, doc_id, text),
            )
            stored += cur.rowcount or 0
        return stored

    # --- search ------------------------------------------------------------------------

    def _load(self, conn: sqlite3.Connection) -> tuple[np.ndarray, np.ndarray]:
        """The matrix of all vectors (cached; extended in place when rows were only added)."""
        import numpy as np

        max_seq, count = conn.execute("SELECT coalesce(max(seq), 0), count(*) FROM embeddings").fetchone()
        with self._lock:
            if (max_seq, count) == self._seen and self._matrix is not None and self._ids is not None:
                return self._matrix, self._ids
            old_seq, old_count = self._seen
            grew_only = (
                self._matrix is not None
                and self._ids is not None
                and max_seq >= old_seq
                and count - old_count
                == conn.execute("SELECT count(*) FROM embeddings WHERE seq > ?", (old_seq,)).fetchone()[0]
            )
            where, params = ("WHERE seq > ?", (old_seq,)) if grew_only else ("", ())
            rows = conn.execute(
                f"SELECT id, vec FROM embeddings {where} ORDER BY seq", params
            ).fetchall()
            dim = self.embedder.dim
            good = [(i, v) for i, v in rows if len(v) == dim * 4]
            ids = np.fromiter((i for i, _ in good), dtype=np.int64, count=len(good))
            mat = (
                np.frombuffer(b"".join(v for _, v in good), dtype=np.float32).reshape(len(good), dim)
                if good
                else np.zeros((0, dim), dtype=np.float32)
            )
            if grew_only and self._matrix is not None and self._ids is not None:
                mat = np.concatenate([self._matrix, mat])
                ids = np.concatenate([self._ids, ids])
            self._matrix, self._ids, self._seen = mat, ids, (max_seq, count)
            self._row_of = None
            return mat, ids

    def scores(
        self,
        conn: sqlite3.Connection,
        query_vec: np.ndarray,
        *,
        id_ranges: Sequence[tuple[int, int]],
    ) -> VectorScores | None:
        """Similarity of ``query_vec`` to every vector with an id in ``id_ranges``
        (``None`` when there is none): one matrix product."""
        import numpy as np

        matrix, ids = self._load(conn)
        if not len(ids):
            return None
        mask = np.zeros(len(ids), dtype=bool)
        for lo, hi in id_ranges:
            mask |= (ids >= lo) & (ids < hi)
        if not mask.any():
            return None
        q = _unit_rows(query_vec)[0]
        if mask.all():
            if self._row_of is None or len(self._row_of) != len(ids):
                self._row_of = {int(i): r for r, i in enumerate(ids)}
            return VectorScores(ids, matrix @ q, self._row_of)
        return VectorScores(ids[mask], matrix[mask] @ q, None)


class VectorScores:
    """The similarities of one query to the vectors in scope, and their spread."""

    def __init__(self, ids: np.ndarray, sims: np.ndarray, rows: dict[int, int] | None) -> None:
        self.ids, self.sims = ids, sims
        self._rows = rows if rows is not None else {int(i): r for r, i in enumerate(ids)}
        self.mean = float(sims.mean())
        # A floor: with a handful of documents (or identical ones) the spread says nothing.
        self.std = max(float(sims.std()), 0.02)

    def top(self, k: int) -> list[tuple[int, float]]:
        import numpy as np

        k = min(k, len(self.ids))
        if k <= 0:
            return []
        top = np.argpartition(-self.sims, k - 1)[:k]
        top = top[np.argsort(-self.sims[top], kind="stable")]
        return [(int(self.ids[i]), float(self.sims[i])) for i in top]

    def similarity(self, doc_id: int) -> float | None:
        row = self._rows.get(doc_id)
        return None if row is None else float(self.sims[row])

    def standardise(self, sim: float) -> float:
        """Standard deviations above the typical document's similarity to the query."""
        return (sim - self.mean) / self.std
