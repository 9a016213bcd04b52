"""The LoCoMo retrieval benchmark on a small synthetic file of the same shape (the real one
is not part of the project): it runs end to end, reports both halves apart, and bad input
is one line naming the file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from benchmarks.locomo import dataset
from benchmarks.locomo.__main__ import main
from benchmarks.locomo.ingest import ingest
from benchmarks.locomo.retrieval import CachedEmbedder, PlainBM25, evaluate
from benchmarks.locomo.synthetic import make, write

from hippobot.recall import RecallIndex
from hippobot.recall.embeddings import EmbeddingsUnavailableError


class WordHashEmbedder:
    """Bag of hashed words: a stand-in model, deterministic and instant."""

    name = "test/word-hash"
    dim = 64

    def __init__(self, fail_after_queries: int | None = None) -> None:
        self.queries = 0
        self.fail_after = fail_after_queries

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            v[int(hashlib.md5(word.strip("?.!,").encode()).hexdigest(), 16) % self.dim] += 1.0
        return v / (np.linalg.norm(v) or 1.0)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vec(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        self.queries += 1
        if self.fail_after is not None and self.queries > self.fail_after:
            raise EmbeddingsUnavailableError("embedding endpoint for test/word-hash failed: down")
        return self._vec(text)


def test_the_benchmark_reports_both_halves_beside_plain_bm25(tmp_path: Path, capsys) -> None:
    data = write(tmp_path / "locomo.json", conversations=2)
    out = tmp_path / "out.json"
    assert main(["--data", str(data), "--embedder", "off", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [g["label"] for g in report["groups"]] == ["1", "2"]
    for group in report["groups"]:
        # 12 fact questions and the malformed-evidence one; "opera" has no evidence.
        assert group["questions"] == 13
        assert group["skipped_no_evidence"] == {"open-domain": 1}
        kw = group["retrievers"]["hippobot keyword"]["all"]
        bm25 = group["retrievers"]["plain BM25"]["all"]
        assert kw["R@10"] >= bm25["R@5"] > 0
        assert group["latency_ms"]["hippobot keyword"]["n"] == 13
    table = capsys.readouterr().out
    assert "plain BM25" in table and "hippobot keyword" in table and "R@5" in table
    assert "no embedder" in table


def test_conversations_select_a_half(tmp_path: Path) -> None:
    data = write(tmp_path / "locomo.json", conversations=3)
    out = tmp_path / "out.json"
    assert main(["--data", str(data), "--embedder", "off", "--out", str(out),
                 "--conversations", "2-3"]) == 0
    (group,) = json.loads(out.read_text())["groups"]
    assert group["conversations"] == ["synth-2", "synth-3"]


def test_ingest_writes_sessions_as_the_session_store_reads_them(tmp_path: Path) -> None:
    (conv, *_) = dataset.load(write(tmp_path / "l.json", conversations=1))
    data = ingest(conv, tmp_path / "ws")
    files = sorted((data.workspace / "sessions" / "locomo").glob("*.jsonl"))
    assert len(files) == len(conv.sessions)
    first = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert first[0]["_type"] == "session" and first[0]["key"] == "locomo:synth-1-s1"
    assert first[1]["role"] == "user" and first[1]["content"].startswith("Nora: ")
    assert first[2]["role"] == "assistant" and first[2]["content"].startswith("Felix: ")
    assert first[1]["timestamp"].startswith("2023-05-08T13:56")
    hit = RecallIndex(data.workspace).search("kitten Pixel", k=1)[0]
    assert data.dia_id(hit.citation) is not None
    assert "Pixel" in dict(data.docs)[data.dia_id(hit.citation)]


def test_plain_bm25_ranks_the_rare_word_first() -> None:
    bm25 = PlainBM25(["the cat sat", "a dog ran far", "the cat and the dog", "zebra crossing"])
    assert int(np.argmax(bm25.scores("where is the zebra"))) == 3


def test_an_embedder_failing_mid_run_falls_back_to_keywords_and_says_so(tmp_path: Path) -> None:
    convs = dataset.load(write(tmp_path / "l.json", conversations=1))
    warnings: list[str] = []
    flaky = CachedEmbedder(WordHashEmbedder(fail_after_queries=5), tmp_path / "cache")
    result = evaluate("1", convs, tmp_path / "work", flaky, latency_sample=0, warn=warnings.append)
    assert len(warnings) == 1 and "falls back to keywords" in warnings[0]
    report = result.to_json()
    assert report["hybrid_keyword_fallbacks"] == 13 - 5
    assert any("embedder failed" in note for note in report["notes"])
    hybrid = report["retrievers"]["hippobot hybrid"]["all"]
    assert hybrid["questions"] == 13  # every question still answered, by keywords


def test_vectors_are_cached_between_runs(tmp_path: Path) -> None:
    convs = dataset.load(write(tmp_path / "l.json", conversations=1))
    first = CachedEmbedder(WordHashEmbedder(), tmp_path / "cache")
    evaluate("1", convs, tmp_path / "w1", first, latency_sample=0)
    assert first.embedded > 0
    again = CachedEmbedder(WordHashEmbedder(), tmp_path / "cache")
    result = evaluate("1", convs, tmp_path / "w2", again, latency_sample=0)
    assert again.embedded == 0 and result.from_cache > 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ("[]", "expected a non-empty list"),
        ('[{"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": []}}]',
         "session_1 has no session_1_date_time"),
    ],
)
def test_a_bad_data_file_is_one_line_naming_it(tmp_path: Path, capsys, content, expected) -> None:
    path = tmp_path / "locomo10.json"
    if content is not None:
        path.write_text(content)
    assert main(["--data", str(path), "--embedder", "off", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and expected in err[0]


def test_malformed_evidence_is_split_and_unknown_turns_dropped(tmp_path: Path) -> None:
    raw = make(conversations=1)
    raw[0]["qa"].append({"question": "q?", "answer": "-", "evidence": ["D1:2; D9:99"],
                         "category": 4})
    path = tmp_path / "l.json"
    path.write_text(json.dumps(raw))
    (conv,) = dataset.load(path)
    assert conv.questions[-1].evidence == ("D1:2",)
    assert conv.no_evidence == {3: 1}


def test_autorecall_reports_the_answers_shown_beside_bm25s_excerpts(tmp_path: Path) -> None:
    # Which questions have their gold answer, word for word, in what recall adds: the same
    # containment the QA benchmark scores replies by, of what the model is shown.
    import asyncio

    from benchmarks.locomo.autorecall import BM25, measure, table

    path = write(tmp_path / "locomo.json", conversations=1)
    convs = dataset.load(path)
    result = asyncio.run(measure(convs, tmp_path / "work", None, bars=(0.0,)))
    shown, excerpts = result["bare"]["0.0"], result[BM25]["-"]
    assert shown["questions"] == excerpts["questions"] > 0  # one row per question, both ways
    # The synthetic facts are found by their words: some answers are shown, by both.
    assert 0.0 < shown["answer"] <= 1.0 and 0.0 < excerpts["answer"] <= 1.0
    assert excerpts["hits"] == 5.0  # BM25's top 5 turns, as the QA baseline pastes them
    rendered = table(result, "synthetic")
    assert "answer among the recalled" in rendered and f"| {BM25} | - | - |" in rendered
