"""The semantic benchmark's quality half, small: with the real local embedder, hybrid search
beats keywords on paraphrases and does not lose on literal queries."""

from __future__ import annotations

from pathlib import Path

from benchmarks.semantic_bench import quality

from hippobot.recall.embedders import LocalEmbedder


def test_hybrid_beats_bm25_on_paraphrases_and_keeps_literal_queries(tmp_path: Path) -> None:
    result = quality(tmp_path / "ws", LocalEmbedder(), distractors=20)
    assert result["paraphrase_overlap"] == 0  # the paraphrases really share no word
    assert result["paraphrase"]["bm25"] < 0.2
    assert result["paraphrase"]["hybrid"] >= 0.6
    assert result["literal"]["hybrid"] >= result["literal"]["bm25"] >= 0.9
