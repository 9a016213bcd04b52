"""The optional semantic side: off by default, honest when missing, wired when given."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import pytest

from hippobot.recall import RecallIndex
from hippobot.recall.embeddings import (
    Embedder,
    EmbeddingsUnavailableError,
    load_embedder,
    reciprocal_rank_fusion,
    register_backend,
)

from .conftest import Workspace


class ConceptEmbedder:
    """Test double: maps a handful of words onto shared concept axes, so "automobile"
    and "car" are close. It only exercises the plumbing; it is not a model."""

    name = "test-concepts"
    CONCEPTS = {
        "car": 0,
        "automobile": 0,
        "vehicle": 0,
        "dog": 1,
        "puppy": 1,
        "rain": 2,
        "umbrella": 2,
    }
    dim = 4

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in text.lower().replace(".", " ").split():
                vec[self.CONCEPTS.get(word, 3)] += 1.0
            out.append(vec)
        return out


def _vector_count(index: RecallIndex) -> int:
    with sqlite3.connect(index.path) as conn:
        return conn.execute("SELECT count(*) FROM vectors").fetchone()[0]


def test_off_by_default_stores_no_vectors(ws: Workspace, index: RecallIndex) -> None:
    ws.add_history(1, "bought a new car")

    assert [h.citation for h in index.search("car")] == ["history#1"]
    assert _vector_count(index) == 0
    assert load_embedder(None) is None and load_embedder("off") is None


def test_unknown_backend_says_it_is_not_available() -> None:
    with pytest.raises(EmbeddingsUnavailableError, match="not available"):
        load_embedder("some-model")


def test_registered_backend_loads() -> None:
    register_backend("test-concepts", ConceptEmbedder)

    embedder = load_embedder("test-concepts")

    assert isinstance(embedder, Embedder)


def test_semantic_hits_are_fused_with_keyword_hits(ws: Workspace) -> None:
    ws.add_history(1, "- Bought a new automobile in March")
    ws.add_history(2, "- The dog needs a walk")
    ws.add_message("telegram:5", "user", "my vehicle is red")
    embedder = ConceptEmbedder()
    index = RecallIndex(ws.root, embedder=embedder)
    try:
        hits = index.search("car", session_key="cli:direct")
        private = index.search("car", session_key="cli:direct", include_other_sessions=False)
        vectors = _vector_count(index)
    finally:
        index.close()

    citations = [h.citation for h in hits]
    assert set(citations[:2]) == {"history#1", "session telegram:5#0"}  # no keyword match
    assert "session telegram:5#0" not in [h.citation for h in private]
    assert vectors == 3


def test_vectors_follow_their_documents(ws: Workspace) -> None:
    ws.write("memory/MEMORY.md", "- Keeps an umbrella by the door\n- Has a puppy\n")
    index = RecallIndex(ws.root, embedder=ConceptEmbedder())
    try:
        index.sync()
        assert _vector_count(index) == 1  # one paragraph chunk
        ws.write("memory/MEMORY.md", "- Has a puppy\n\n- Likes rain\n")
        index.sync()
        assert _vector_count(index) == 2
    finally:
        index.close()


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    assert reciprocal_rank_fusion([[1, 2, 3], [2, 4, 5]])[:2] == [2, 1]
    assert reciprocal_rank_fusion([[], [7]]) == [7]
