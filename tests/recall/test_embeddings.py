"""Semantic recall: vectors beside the keyword index, filled in the background, fused with
BM25; off means exactly keyword search; failures fall back to keywords with one warning."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from hippobot.config import load_settings
from hippobot.recall import RecallIndex
from hippobot.recall.embedders import EndpointEmbedder, LocalEmbedder, embedder_from_settings
from hippobot.recall.embeddings import EmbeddingsUnavailableError
from hippobot.recall.ranking import HYBRID, KEYWORD, Evidence, relevance
from hippobot.testing import ScriptedModel
from hippobot.testing.server import ScriptedServer

from .conftest import Workspace

CONCEPTS = {
    "car": 0, "automobile": 0, "vehicle": 0, "drive": 0,
    "dog": 1, "puppy": 1, "pet": 1, "cat": 1,
    "rain": 2, "umbrella": 2, "weather": 2,
}  # fmt: skip
DIM = 4


def concept_vector(text: str) -> list[float]:
    """Maps a handful of words onto shared axes so "automobile" is near "car". A test
    double for the plumbing, served over HTTP as /v1/embeddings; it is not a model."""
    vec = [0.0] * DIM
    for word in text.lower().replace(".", " ").replace("?", " ").split():
        vec[CONCEPTS.get(word, 3)] += 1.0
    return vec


class ConceptEmbedder:
    name = "test/concepts"
    dim = DIM

    def __init__(self, *, fail: bool = False) -> None:
        self.documents = 0
        self.fail = fail

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise EmbeddingsUnavailableError("the test embedder is down")
        self.documents += len(texts)
        return np.asarray([concept_vector(t) for t in texts], dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        if self.fail:
            raise EmbeddingsUnavailableError("the test embedder is down")
        return np.asarray(concept_vector(text), dtype=np.float32)


def _vector_count(index: RecallIndex, model: str | None = None) -> int:
    with sqlite3.connect(index.path) as conn:
        if model:
            return conn.execute("SELECT count(*) FROM embeddings WHERE model=?", (model,)).fetchone()[0]
        return conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]


def _fill(ws: Workspace) -> None:
    ws.add_history(1, "- Bought a new automobile in March")
    ws.add_history(2, "- The puppy needs a walk every morning")
    ws.add_message("telegram:5", "user", "my vehicle is red")
    ws.add_message("cli:direct", "user", "remember the umbrella")


def test_off_means_exactly_keyword_search(ws: Workspace) -> None:
    _fill(ws)
    plain = RecallIndex(ws.root)
    try:
        hits = plain.search("automobile puppy")
        assert not plain.semantic
        assert _vector_count(plain) == 0
    finally:
        plain.close()
    hybrid = RecallIndex(ws.root, embedder=ConceptEmbedder())
    try:
        # Before any vector is made, the fused ranking is the keyword ranking.
        assert [h.citation for h in hybrid.search("automobile puppy")] == [h.citation for h in hits]
    finally:
        hybrid.close()


def test_indexing_never_embeds_the_fill_does_newest_first(ws: Workspace) -> None:
    _fill(ws)
    embedder = ConceptEmbedder()
    index = RecallIndex(ws.root, embedder=embedder)
    try:
        index.sync()
        assert embedder.documents == 0 and _vector_count(index) == 0  # the turn path is free
        first = index.embed_pending(max_docs=2, batch_size=1)
        assert (first.embedded, first.pending) == (2, 2)
        rest = index.embed_pending()
        assert (rest.embedded, rest.pending) == (2, 0)
        assert index.embed_pending().embedded == 0  # nothing twice
    finally:
        index.close()


def test_paraphrase_found_by_meaning_and_private_sessions_respected(ws: Workspace) -> None:
    _fill(ws)
    index = RecallIndex(ws.root, embedder=ConceptEmbedder())
    try:
        index.embed_pending()
        hits = index.search("car", session_key="cli:direct")
        private = index.search("car", session_key="cli:direct", include_other_sessions=False)
    finally:
        index.close()
    assert {h.citation for h in hits[:2]} == {"history#1", "session telegram:5#0"}
    assert "session telegram:5#0" not in [h.citation for h in private]


def test_vectors_follow_their_documents(ws: Workspace) -> None:
    ws.write("memory/MEMORY.md", "- Keeps an umbrella by the door\n- Has a puppy\n")
    index = RecallIndex(ws.root, embedder=ConceptEmbedder())
    try:
        index.sync()
        index.embed_pending()
        assert _vector_count(index) == 1  # one paragraph
        ws.write("memory/MEMORY.md", "- Has a puppy\n\n- Likes rain\n")
        index.sync()
        assert _vector_count(index) == 0  # the old paragraph's vector went with it
        index.embed_pending()
        assert _vector_count(index) == 2
        assert index.search("weather")[0].citation == "memory/MEMORY.md:3"
    finally:
        index.close()


def test_another_model_or_corrupt_vectors_are_rebuilt_not_crashed(ws: Workspace) -> None:
    _fill(ws)
    index = RecallIndex(ws.root, embedder=ConceptEmbedder())
    index.embed_pending()
    index.close()
    with sqlite3.connect(index.path) as conn:
        conn.execute("UPDATE embeddings SET vec = x'00ff' WHERE id = (SELECT min(id) FROM embeddings)")
    other = ConceptEmbedder()
    other.name = "test/other-model"
    index = RecallIndex(ws.root, embedder=other)
    try:
        assert index.search("vehicle")  # works before the rebuild, from keywords
        stats = index.embed_pending()
        assert stats.dropped == 4 and stats.embedded == 4
        assert _vector_count(index, "test/other-model") == 4
        assert index.search("drive")[0].citation in {"history#1", "session telegram:5#0"}
    finally:
        index.close()


def test_embedder_down_falls_back_to_keywords_with_one_warning(ws: Workspace) -> None:
    _fill(ws)
    index = RecallIndex(ws.root, embedder=ConceptEmbedder(fail=True))
    try:
        assert index.embed_pending().embedded == 0
        hits = index.search("automobile")
        assert [h.citation for h in hits] == ["history#1"]
        warning = index.take_semantic_warning()
        assert warning and "keywords only" in warning and "down" in warning
        assert index.take_semantic_warning() is None
    finally:
        index.close()


def test_explain_shows_each_part_of_the_score(ws: Workspace) -> None:
    _fill(ws)
    index = RecallIndex(ws.root, embedder=ConceptEmbedder())
    try:
        index.embed_pending()
        hits = index.search("automobile", explain=True)
    finally:
        index.close()
    top = hits[0]
    assert top.citation == "history#1"
    assert top.explain is not None
    # "- Bought a new automobile in March": one word on the car axis, six elsewhere.
    assert top.explain["bm25_rank"] == 1 and top.explain["vector_rank"] == 2
    assert top.explain["bm25"] and top.explain["similarity"] == pytest.approx(37**-0.5, abs=1e-4)
    semantic_only = next(h for h in hits if h.citation == "session telegram:5#0")
    assert semantic_only.explain is not None and semantic_only.explain["bm25"] is None


def test_a_reply_means_what_it_answers(ws: Workspace) -> None:
    # "Yes, two of them!" says nothing alone; after "Do you have a dog?" it is about pets.
    ws.add_message("cli:direct", "user", "Do you have a dog?")
    ws.add_message("cli:direct", "assistant", "Yes, two of them!")
    ws.add_message("cli:direct", "user", "Is it going to be wet tomorrow?")
    ws.add_history(1, "- Bought a new automobile in March")
    index = RecallIndex(ws.root, embedder=ConceptEmbedder())
    try:
        index.embed_pending()
        hits = {h.citation: h for h in index.search("puppy", explain=True)}
    finally:
        index.close()

    def similarity(citation: str) -> float:
        explain = hits[citation].explain
        assert explain is not None and explain["similarity"] is not None
        return float(explain["similarity"])

    assert similarity("session cli:direct#1") > 0.1
    # Only the one message before counts: the next message (after the reply) is not about
    # pets, nor is the history entry; and the question itself still ranks first.
    assert similarity("session cli:direct#2") == 0.0
    assert similarity("history#1") == 0.0
    assert hits["session cli:direct#0"].score > hits["session cli:direct#1"].score


def _worded(words: float, meaning: float | None = None) -> Evidence:
    """A message holding that share of the query's words (BM25's ``words`` and ``cover``
    say it alike for a message alone)."""
    return Evidence(1, "session", words=words, cover=words, cover_near=words, cover_wide=words,
                    meaning=meaning)  # fmt: skip


def test_evidence_of_words_and_meaning_together_outranks_either_alone() -> None:
    def score(words: float, meaning: float | None) -> float:
        return relevance(_worded(words, meaning), HYBRID)

    both, words_only, meaning_only = score(0.6, 3.0), score(0.6, 0.0), score(0.0, 3.0)
    assert both > max(words_only, meaning_only)
    assert min(words_only, meaning_only) > 0.0 and both < 1.0
    # Without vectors the order is the order of the word evidence.
    ranked = sorted([0.2, 0.9, 0.5], key=lambda w: -relevance(_worded(w), KEYWORD))
    assert ranked == [0.9, 0.5, 0.2]


# --- an OpenAI-compatible endpoint, through the real openai SDK over HTTP ---------------


@pytest.fixture
def embedding_server() -> ScriptedServer:
    model = ScriptedModel()
    model.embedding = concept_vector
    with ScriptedServer(model) as server:
        yield server


def test_endpoint_embeddings_over_http(ws: Workspace, embedding_server: ScriptedServer) -> None:
    _fill(ws)
    embedder = EndpointEmbedder(
        provider="ollama", model="nomic-embed-text", api_key="x", api_base=embedding_server.base_url
    )
    assert embedder.dim == DIM
    index = RecallIndex(ws.root, embedder=embedder)
    try:
        assert index.embed_pending().embedded == 4
        assert index.search("automobile")[0].citation == "history#1"
        assert index.search("drive", k=2)[0].citation in {"history#1", "session telegram:5#0"}
    finally:
        index.close()
    inputs = embedding_server.model.embedding_inputs
    assert "remember the umbrella" in inputs and "drive" in inputs


def test_slow_endpoint_times_out_to_keywords(ws: Workspace, embedding_server: ScriptedServer) -> None:
    _fill(ws)
    embedder = EndpointEmbedder(
        provider="vllm", model="e5", api_key="x", api_base=embedding_server.base_url,
        timeout=0.3, dim=DIM,
    )  # fmt: skip
    embedding_server.model.embedding_delay = 2.0
    index = RecallIndex(ws.root, embedder=embedder)
    try:
        assert [h.citation for h in index.search("automobile")] == ["history#1"]
        assert "keywords only" in (index.take_semantic_warning() or "")
    finally:
        index.close()


def test_endpoint_down_falls_back(ws: Workspace) -> None:
    _fill(ws)
    embedder = EndpointEmbedder(
        provider="vllm", model="e5", api_key="x", api_base="http://127.0.0.1:9/v1", dim=DIM, timeout=1
    )
    index = RecallIndex(ws.root, embedder=embedder)
    try:
        assert index.embed_pending().embedded == 0
        assert [h.citation for h in index.search("automobile")] == ["history#1"]
        assert index.take_semantic_warning()
    finally:
        index.close()


# --- configuration ------------------------------------------------------------------


def _settings(home: Path, recall: dict) -> object:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(
        json.dumps(
            {
                "recall": recall,
                "providers": {"ollama": {"apiBase": "http://127.0.0.1:9/v1"}},
            }
        )
    )
    return load_settings(env={"HIPPOBOT_HOME": str(home)})


def test_config_chooses_the_embedder(tmp_path: Path) -> None:
    assert embedder_from_settings(_settings(tmp_path / "a", {})) is None
    assert embedder_from_settings(_settings(tmp_path / "b", {"embeddings": {"provider": "off"}})) is None
    endpoint = embedder_from_settings(
        _settings(tmp_path / "c", {"embeddings": {"provider": "ollama", "model": "nomic-embed-text", "dimensions": 768}})
    )
    assert isinstance(endpoint, EndpointEmbedder) and endpoint.name == "ollama/nomic-embed-text"
    assert endpoint.dim == 768
    with pytest.raises(EmbeddingsUnavailableError, match="model is required"):
        embedder_from_settings(_settings(tmp_path / "d", {"embeddings": {"provider": "ollama"}}))
    with pytest.raises(EmbeddingsUnavailableError, match="no embeddings API"):
        embedder_from_settings(_settings(tmp_path / "e", {"embeddings": {"provider": "anthropic"}}))
    with pytest.raises(EmbeddingsUnavailableError, match="apiBase"):
        embedder_from_settings(_settings(tmp_path / "f", {"embeddings": {"provider": "mine", "model": "m"}}))


# --- the offline local model (the [embeddings] extra) ---------------------------------


def test_local_model_finds_paraphrases(ws: Workspace, tmp_path: Path) -> None:
    local = embedder_from_settings(_settings(tmp_path / "home", {"embeddings": {"provider": "local"}}))
    assert isinstance(local, LocalEmbedder) and local.dim == 384
    facts = [
        "Alice has a cat named Luna.",
        "The quarterly meeting moved to Tuesday.",
        "We deploy the backend with postgres 16.",
        "My favourite colour is green.",
        "I moved to Osaka last month.",
        "Bob prefers tea over coffee.",
    ]
    for i, fact in enumerate(facts, start=1):
        ws.add_history(i, f"- [durable] {fact}")
    index = RecallIndex(ws.root, embedder=local)
    try:
        index.embed_pending()
        keyword_only = RecallIndex(ws.root)  # words alone find nothing…
        try:
            assert not [h for h in keyword_only.search("which animal lives with me") if "Luna" in h.snippet]
        finally:
            keyword_only.close()
        top5 = [h.snippet for h in index.search("which animal lives with me", k=5)]
        city = [h.snippet for h in index.search("what city do I live in", k=3)]
    finally:
        index.close()
    assert any("Luna" in s for s in top5)  # …meaning does
    assert any("Osaka" in s for s in city)
