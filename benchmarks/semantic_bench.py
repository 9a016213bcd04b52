"""Semantic recall benchmark: BM25 alone vs hybrid (BM25 + vectors, RRF) with the offline
local embedder (multilingual-e5-small, 4-bit, from the ``[embeddings]`` extra).

Measures:

* **quality**: 40 facts about a user, hidden among distractor history entries; for each, a
  *paraphrase* query that shares no content word with the fact ("which animal lives with
  me" → "Alice has a cat named Luna") and a *literal* one that does. recall@5 (the fact is
  among the first five hits) for keyword-only and for hybrid search;
* **indexing throughput**: documents embedded per second by the background fill;
* **scale**: hybrid query latency (query embedding included) p50 / p95 over a workspace of
  50,000 history entries with a vector each. Those filler vectors are random unit vectors
  (embedding 50,000 texts on two cores takes ~15 minutes and would not change the cost of
  a search, which is one matrix product over all of them);
* peak RSS of the process.

Usage::

    python -m benchmarks.semantic_bench            # full run, writes results/semantic.json
    python -m benchmarks.semantic_bench --small    # a quick smoke run, writes nothing
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sqlite3
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from benchmarks.report import write_json
from hippobot.recall import RecallIndex
from hippobot.recall.embedders import LocalEmbedder
from hippobot.recall.query import parse_query

RESULTS = Path(__file__).parent / "results" / "semantic.json"
SEED = 20261201

# (fact, paraphrase query with no shared content word, literal query)
FACTS: list[tuple[str, str, str]] = [
    ("Alice has a cat named Luna.", "which animal lives with me", "cat Luna"),
    ("I work at Initech as a nurse.", "what is my job", "Initech nurse"),
    ("I moved to Osaka last month.", "which city do I live in now", "moved Osaka"),
    ("My favourite colour is green.", "what hue do I like best", "favourite colour"),
    ("I am allergic to peanuts.", "which food makes me sick", "allergic peanuts"),
    ("My daughter Mia starts school in September.", "when does my kid begin classes", "Mia school"),
    ("We deploy the backend on Kubernetes.", "how do we run our servers in production", "deploy Kubernetes"),
    ("The production database is Postgres 16.", "which SQL engine stores our data", "database Postgres"),
    ("I play the cello in a community orchestra.", "what instrument do I perform with", "cello orchestra"),
    ("My flight to Lisbon leaves on Friday.", "when is my trip to Portugal", "flight Lisbon"),
    ("I prefer tea over coffee in the morning.", "what do I drink at breakfast", "tea coffee"),
    ("My brother Tom lives in Toronto.", "where is my sibling based", "brother Toronto"),
    ("I run a marathon every spring.", "which long race do I do yearly", "marathon spring"),
    ("The team standup is at 9:30 every weekday.", "when is our daily meeting", "standup 9:30"),
    ("I drive an old blue Volvo.", "what car do I own", "blue Volvo"),
    ("My dentist appointment is on the 14th.", "when do I see the tooth doctor", "dentist appointment"),
    ("I am learning Japanese on weekends.", "which language am I studying", "learning Japanese"),
    ("Our rent is due on the first of each month.", "when must we pay the landlord", "rent due"),
    ("I am vegetarian and never eat meat.", "what is my diet", "vegetarian meat"),
    ("My laptop is a ThinkPad X1 Carbon.", "which computer do I use", "ThinkPad laptop"),
    ("The wifi password is taped under the router.", "where can I find the network login", "wifi password"),
    ("I was born in Valencia in 1990.", "what is my hometown", "born Valencia"),
    ("Our dog Biscuit is afraid of thunder.", "which pet hates storms", "Biscuit thunder"),
    ("I take vitamin D every morning.", "what supplement do I use daily", "vitamin D"),
    ("My wife's birthday is on March 3rd.", "when does my spouse celebrate getting older", "wife birthday"),
    ("We use Rust for the ingestion service.", "which programming language powers the pipeline", "Rust ingestion"),
    ("I hate cold showers.", "what kind of bathing do I dislike", "cold showers"),
    ("My favourite band is Radiohead.", "which musicians do I love", "favourite band Radiohead"),
    ("I keep my passport in the desk drawer.", "where is my travel document stored", "passport drawer"),
    ("The garden tomatoes need watering daily.", "how often should the vegetable plants get water", "tomatoes watering"),
    ("I quit smoking two years ago.", "did I give up cigarettes", "quit smoking"),
    ("The release freeze starts on December 15.", "when do we stop shipping new code", "release freeze"),
    ("My therapist is Dr. Okafor.", "who is my counsellor", "therapist Okafor"),
    ("I sleep badly when it is hot.", "what disturbs my rest in summer", "sleep hot"),
    ("We bought a house in Ghent.", "where is our new home", "house Ghent"),
    ("My bike was stolen last week.", "what happened to my bicycle", "bike stolen"),
    ("I read science fiction before bed.", "what books do I enjoy at night", "science fiction"),
    ("The invoice for March is still unpaid.", "which bill have we not settled", "invoice unpaid"),
    ("My grandmother turns 90 in May.", "how old will granny be", "grandmother 90"),
    ("I use Neovim as my editor.", "which program do I write code in", "Neovim editor"),
]

DISTRACTOR_SUBJECTS = [
    "the quarterly report", "a podcast episode", "the weekend plan", "the new office chairs",
    "a chess puzzle", "the build pipeline", "the team lunch", "an old photo album",
    "the electricity bill", "a board game night", "the printer driver", "the book club",
    "a street festival", "the parking permit", "a software licence", "the recycling schedule",
]  # fmt: skip
DISTRACTOR_VERBS = [
    "was discussed", "got postponed", "needs a follow-up", "came up briefly",
    "was mentioned in passing", "looked fine", "was compared with last year", "is on the list",
]  # fmt: skip


def _write_history(root: Path, entries: list[str]) -> None:
    start = datetime(2026, 6, 1)
    (root / "memory").mkdir(parents=True, exist_ok=True)
    with (root / "memory" / "history.jsonl").open("w", encoding="utf-8") as fh:
        for cursor, content in enumerate(entries, start=1):
            ts = (start + timedelta(hours=cursor)).strftime("%Y-%m-%d %H:%M")
            entry = {"cursor": cursor, "timestamp": ts, "content": content, "session_key": "cli:direct"}
            fh.write(json.dumps(entry) + "\n")


def _shares_words(query: str, fact: str) -> bool:
    terms = {t.text for t in parse_query(query).terms} if parse_query(query) else set()
    fact_terms = {t.text for t in parse_query(fact).terms} if parse_query(fact) else set()
    return bool(terms & fact_terms)


def quality(root: Path, embedder: LocalEmbedder, *, distractors: int) -> dict:
    rng = random.Random(SEED)
    entries = [f"- [durable] {fact}" for fact, _, _ in FACTS]
    for _ in range(distractors):
        entries.append(
            f"- [ephemeral] {rng.choice(DISTRACTOR_SUBJECTS).capitalize()} {rng.choice(DISTRACTOR_VERBS)}."
        )
    rng.shuffle(entries)
    _write_history(root, entries)
    cite = {entry[len("- [durable] "):]: f"history#{n}" for n, entry in enumerate(entries, start=1)}
    plain = RecallIndex(root)
    hybrid = RecallIndex(root, embedder=embedder)
    started = time.perf_counter()
    fill = hybrid.embed_pending(max_docs=10**9, batch_size=64)
    fill_s = time.perf_counter() - started
    out: dict = {"facts": len(FACTS), "distractors": distractors, "paraphrase_overlap": 0}
    for mode in ("paraphrase", "literal"):
        found = {"bm25": 0, "hybrid": 0}
        for fact, para, literal in FACTS:
            query = para if mode == "paraphrase" else literal
            if mode == "paraphrase" and _shares_words(query, fact):
                out["paraphrase_overlap"] += 1
            for name, index in (("bm25", plain), ("hybrid", hybrid)):
                hits = index.search(query, k=5)
                if any(h.citation == cite[fact] for h in hits):
                    found[name] += 1
        out[mode] = {name: round(count / len(FACTS), 3) for name, count in found.items()}
    out["embedded"] = fill.embedded
    out["embed_docs_per_s"] = round(fill.embedded / fill_s, 1) if fill_s else None
    plain.close()
    hybrid.close()
    return out


def scale(root: Path, embedder: LocalEmbedder, *, entries: int, queries: int) -> dict:
    import numpy as np

    rng = random.Random(SEED)
    texts = [
        f"- {rng.choice(DISTRACTOR_SUBJECTS)} {rng.choice(DISTRACTOR_VERBS)} (note {i})"
        for i in range(entries)
    ]
    _write_history(root, texts)
    index = RecallIndex(root, embedder=embedder)
    started = time.perf_counter()
    index.sync()
    sync_s = time.perf_counter() - started
    index.close()
    vectors = np.random.default_rng(SEED).standard_normal((entries, embedder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with sqlite3.connect(index.path) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM docs ORDER BY id")]
        conn.executemany(
            "INSERT INTO embeddings(id, model, vec) VALUES (?,?,?)",
            ((i, embedder.name, vectors[n].tobytes()) for n, i in enumerate(ids)),
        )
    index = RecallIndex(root, embedder=embedder)
    asked = [para for _, para, _ in FACTS]
    started = time.perf_counter()
    index.search(asked[0])  # first search loads the vectors
    first_ms = (time.perf_counter() - started) * 1000
    times = []
    for i in range(queries):
        started = time.perf_counter()
        index.search(asked[i % len(asked)] + f" {i}", k=8)
        times.append((time.perf_counter() - started) * 1000)
    keyword_times = []
    plain = RecallIndex(root)
    plain.search("warmup")
    for i in range(queries):
        started = time.perf_counter()
        plain.search(asked[i % len(asked)] + f" {i}", k=8)
        keyword_times.append((time.perf_counter() - started) * 1000)
    index.close()
    plain.close()
    times.sort()
    keyword_times.sort()
    return {
        "entries": entries,
        "index_sync_s": round(sync_s, 2),
        "first_search_ms": round(first_ms, 1),
        "hybrid_p50_ms": round(statistics.median(times), 1),
        "hybrid_p95_ms": round(times[int(0.95 * (len(times) - 1))], 1),
        "bm25_p50_ms": round(statistics.median(keyword_times), 1),
        "bm25_p95_ms": round(keyword_times[int(0.95 * (len(keyword_times) - 1))], 1),
    }


def table(r: dict) -> str:
    q, s = r["quality"], r["scale"]
    rows = [
        "semantic recall (local embedder: multilingual-e5-small q4)",
        f"  recall@5, paraphrases ({q['facts']} facts, {q['distractors']} distractors): "
        f"BM25 {q['paraphrase']['bm25']:.2f}  hybrid {q['paraphrase']['hybrid']:.2f}",
        f"  recall@5, literal queries:                            "
        f"BM25 {q['literal']['bm25']:.2f}  hybrid {q['literal']['hybrid']:.2f}",
        f"  paraphrases sharing a word with their fact: {q['paraphrase_overlap']}",
        f"  background embedding: {q['embed_docs_per_s']} documents/s",
        f"  query latency at {s['entries']:,} entries: hybrid p50 {s['hybrid_p50_ms']} ms, "
        f"p95 {s['hybrid_p95_ms']} ms (BM25 alone p50 {s['bm25_p50_ms']}, p95 {s['bm25_p95_ms']}); "
        f"first search {s['first_search_ms']} ms",
        f"  peak RSS: {r['peak_rss_mb']} MB",
    ]
    return "\n".join(rows)


def run(root: Path, *, small: bool) -> dict:
    embedder = LocalEmbedder()
    result = {
        "quality": quality(root / "quality", embedder, distractors=60 if small else 1500),
        "scale": scale(root / "scale", embedder, entries=2_000 if small else 50_000, queries=20 if small else 200),
    }
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="quick smoke run, writes nothing")
    parser.add_argument("--out", type=Path, help="JSON results (full run default: results/semantic.json)")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="semantic-bench-")
    try:
        result = run(Path(tmp), small=args.small)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(result))
    out = args.out or (None if args.small else RESULTS)
    if out:
        write_json(result, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
