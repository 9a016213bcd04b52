"""Recall before answering on LoCoMo: what the agent adds to a question by itself.

For each question (categories 1, 2, 4) of the chosen conversations, asked in a fresh
session of a workspace holding the conversation (as ``benchmarks.locomo --qa`` builds it),
the memory recall before answering would add (:class:`hippobot.recall.auto.AutoRecall`,
the agent's own code), at several relevance bars: the share of questions where an
evidence turn is among the recalled hits, the hits and the tokens added on average.

Two forms of each question: as LoCoMo writes it, and as the QA benchmark asks it (the
question followed by "Answer with a short phrase, ..."), since a user's message is rarely
a bare question.

    python -m benchmarks.locomo.autorecall --data locomo10.json --conversations 1-5 \
        --cache benchmarks/results/locomo-cache

Tune on 1-5; report 6-10 apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import dataset
from .ingest import ingest
from .qa import ASK, DEFAULT_CATEGORIES, bm25_lines, contains, select_questions
from .retrieval import CachedEmbedder

BARS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.1)
FORMS = {"bare": "{question}", "asked": ASK}
BM25 = "bm25 top 5"


class _NothingShown:
    """A fresh session: the request shows nothing the recall could repeat."""

    def in_prompt(self, text: str) -> bool:
        return False

    def replays(self, session_key: str | None, number: int) -> bool:
        return False

    def recalled_before(self, citation: str) -> bool:
        return False

    def shows_entry(self, cursor: int) -> bool:
        return False


async def measure(
    convs: Sequence[dataset.Conversation], work: Path, embedder: CachedEmbedder | None,
    bars: Sequence[float] = BARS, max_tokens: int = 300,
) -> dict[str, dict[str, dict[str, float]]]:
    """``{form: {bar: {"evidence": share, "answer": share, "hits": mean, "tokens": mean,
    "questions": n}}}``; ``answer`` is the share of questions whose gold answer appears word
    for word in the recalled text (the QA benchmark's containment, of what the model is
    shown rather than of its reply). Form ``bm25 top 5`` is the QA baseline's excerpts,
    under the bar ``-``."""
    from hippobot.context.tokens import count_text
    from hippobot.recall import RecallIndex
    from hippobot.recall.auto import AutoRecall, recalled_text

    refs = select_questions(list(convs), None, DEFAULT_CATEGORIES)
    tally: dict[str, dict[str, list[tuple[bool, bool, int, int]]]] = {f: {str(b): [] for b in bars} for f in FORMS}
    tally[BM25] = {"-": []}
    for conv in convs:
        data = ingest(conv, work / conv.sample_id)
        with RecallIndex(data.workspace, embedder=embedder) as index:
            index.embed_pending(max_docs=10**9, batch_size=64)
            for bar in bars:
                auto = AutoRecall(lambda index=index: index, max_tokens=max_tokens, min_score=bar,
                                  timeout_s=600.0, include_other_sessions=True)  # fmt: skip
                for ref in refs:
                    if ref.conversation is not conv:
                        continue
                    for form, template in FORMS.items():
                        text = template.format(question=ref.question.text)
                        got = await auto.recall(text, session_key="qa:fresh", shown=_NothingShown)
                        found = any(data.dia_id(h.citation) in ref.question.evidence for h in got.hits)
                        shown = "\n".join(recalled_text(h.line) for h in got.hits)
                        tally[form][str(bar)].append(
                            (found, contains(shown, ref.question), len(got.hits), sum(h.tokens for h in got.hits))
                        )  # fmt: skip
        for ref in refs:
            if ref.conversation is conv:
                excerpts = bm25_lines(conv, data, ref.question.text)
                cited = excerpts.count("\n") + 1 if excerpts else 0
                tally[BM25]["-"].append(
                    (False, contains(excerpts, ref.question), cited, count_text(excerpts))
                )  # fmt: skip
        if embedder is not None:
            embedder.save()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for form, per_bar in tally.items():
        out[form] = {}
        for bar, rows in per_bar.items():
            n = len(rows) or 1
            out[form][bar] = {
                "evidence": round(sum(r[0] for r in rows) / n, 3),
                "answer": round(sum(r[1] for r in rows) / n, 3),
                "hits": round(sum(r[2] for r in rows) / n, 2),
                "tokens": round(sum(r[3] for r in rows) / n, 1),
                "questions": len(rows),
            }
    return out


def table(result: dict[str, dict[str, dict[str, float]]], label: str) -> str:
    lines = [f"### {label}", "",
             "| question form | bar | evidence among the recalled | answer among the recalled | hits | tokens |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for form, per_bar in result.items():
        for bar, row in per_bar.items():
            evidence = "-" if form == BM25 else f"{row['evidence']:.2f}"  # its turns are not cited
            lines.append(f"| {form} | {bar} | {evidence} | {row['answer']:.2f} | {row['hits']:.1f} | {row['tokens']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.locomo.autorecall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="path to locomo10.json")
    parser.add_argument("--conversations", action="append", help="e.g. 1-5 (repeatable; default 1-5 and 6-10)")
    parser.add_argument("--embedder", choices=("local", "off"), default="local")
    parser.add_argument("--cache", type=Path, help="where vectors are kept between runs")
    parser.add_argument("--tokens", type=int, default=300, help="recall.autoTokens (default 300)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        convs = dataset.load(args.data)
    except dataset.DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    embedder = None
    if args.embedder == "local":
        from hippobot.recall.embedders import LocalEmbedder

        cache = args.cache or Path(tempfile.mkdtemp(prefix="locomo-vectors-"))
        embedder = CachedEmbedder(LocalEmbedder(), cache)
    report: dict[str, Any] = {}
    for spec in args.conversations or ["1-5", "6-10"]:
        with tempfile.TemporaryDirectory(prefix="locomo-auto-") as work:
            result = asyncio.run(measure(dataset.select(convs, spec), Path(work), embedder, max_tokens=args.tokens))
        report[spec] = result
        print(table(result, f"conversations {spec} ({'hybrid' if embedder else 'keyword'})"))
        print()
    if args.out:
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
