"""``python -m benchmarks.locomo --data PATH/locomo10.json``: LoCoMo retrieval, two halves;
with ``--qa --endpoint URL --model NAME``, question answering end to end (:mod:`.qa`).

Conversations 1-5 are the half the ranking may be tuned on, 6-10 the held-out half; both
are reported apart (``--conversations 6-10`` for one selection; repeat the option for
several). Prints a table per selection and writes everything to
``benchmarks/results/locomo.json`` (``--out``). Document and query vectors are cached in
``benchmarks/results/locomo-cache/`` (``--cache``), keyed by model and text.

The data file is not part of the project (CC BY-NC 4.0): get ``data/locomo10.json`` from
the public GitHub repository snap-research/LoCoMo. ``python -m benchmarks.locomo.synthetic
FILE`` writes a small file of the same shape.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import write_json
from hippobot.recall.embeddings import EmbeddingsUnavailableError

from . import dataset
from .retrieval import KS, RETRIEVERS, CachedEmbedder, GroupResult, evaluate

RESULTS = Path(__file__).resolve().parents[1] / "results"
_HELD_OUT = {"1-5": "tuning", "6-10": "held out"}


def _log(message: str) -> None:
    sys.stderr.write(f"[locomo {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def default_groups(n: int) -> list[str]:
    """The first half (rounded up) and the rest: 1-5 and 6-10 for LoCoMo's ten."""
    half = (n + 1) // 2
    groups = [f"1-{half}" if half > 1 else "1"]
    if n > half:
        groups.append(f"{half + 1}-{n}" if n > half + 1 else str(n))
    return groups


def make_embedder(choice: str, cache: Path, threads: int | None) -> tuple[CachedEmbedder | None, str | None]:
    """The cached local embedder, or ``None`` and why not."""
    if choice == "off":
        return None, None
    from hippobot.recall.embedders import LocalEmbedder

    try:
        return CachedEmbedder(LocalEmbedder(threads=threads), cache), None
    except EmbeddingsUnavailableError as exc:
        return None, str(exc)


def format_table(group: dict[str, Any]) -> str:
    cats = [c for c in ("multi-hop", "temporal", "open-domain", "single-hop")]
    skipped = group["skipped_no_evidence"]
    skip_text = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "none"
    lines = [
        f"LoCoMo retrieval, conversations {group['label']}: {len(group['conversations'])} "
        f"conversations, {group['turns']:,} turns, {group['questions']:,} questions of "
        f"categories 1-4 (skipped for no evidence turn: {skip_text})",
        f"{'retriever':<18}" + "".join(f"{'R@' + str(k):>7}" for k in KS) + f"{'ev@10':>7}"
        + "   R@5 by category: " + " ".join(f"{c:>11}" for c in cats),
    ]
    for name in RETRIEVERS:
        parts = group["retrievers"].get(name, {})
        total = parts.get("all")
        if not total or not total["questions"]:
            continue
        row = f"{name:<18}" + "".join(f"{total['R@' + str(k)]:>7.3f}" for k in KS)
        row += f"{total['ev@10']:>7.3f}" + " " * 20
        row += " ".join(
            f"{parts[c]['R@5']:>11.3f}" if c in parts else f"{'-':>11}" for c in cats
        )
        lines.append(row)
    for name, lat in group["latency_ms"].items():
        if lat["n"]:
            lines.append(
                f"search latency {name}: p50 {lat['p50']} ms, p95 {lat['p95']} ms "
                f"({lat['n']} searches{', query embedding included' if name == 'hippobot hybrid' else ''})"
            )
    emb = group["embedding"]
    lines.append(
        f"indexing {group['index_seconds']:.2f} s; embedding {emb['seconds']:.1f} s "
        f"({emb['embedded']:,} texts embedded, {emb['from_cache']:,} from the cache)"
    )
    lines.extend(f"note: {n}" for n in group["notes"])
    return "\n".join(lines)


def run(
    data: Path,
    groups: list[str] | None,
    *,
    embedder: CachedEmbedder | None,
    latency_sample: int = 100,
    keep: Path | None = None,
    embedder_problem: str | None = None,
) -> dict[str, Any]:
    conversations = dataset.load(data)
    specs = groups or default_groups(len(conversations))
    selections = [(spec, dataset.select(conversations, spec)) for spec in specs]
    work = keep or Path(tempfile.mkdtemp(prefix="locomo-"))
    results: list[GroupResult] = []
    try:
        for spec, convs in selections:
            label = spec
            if len(conversations) == 10 and spec in _HELD_OUT:
                label = f"{spec} ({_HELD_OUT[spec]})"
            group_dir = work / spec.replace(",", "_")
            results.append(
                evaluate(
                    label, convs, group_dir, embedder, latency_sample=latency_sample,
                    warn=lambda m: print(m, file=sys.stderr), progress=_log,
                )
            )
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    out_groups = [r.to_json() for r in results]
    if embedder_problem:
        for g in out_groups:
            g["notes"].insert(0, f"embedder unavailable: {embedder_problem}")
    return {
        "data": str(data),
        "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
        "embedder": embedder.name if embedder is not None else None,
        "groups": out_groups,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo",
        description="LoCoMo retrieval: hippobot keyword and hybrid search beside plain BM25 "
        "and plain vector search, R@1/5/10 per category, for the tuning and held-out halves.",
    )
    parser.add_argument("--data", type=Path, required=True, help="path to locomo10.json")
    parser.add_argument(
        "--conversations", action="append", metavar="SPEC",
        help="conversations to report together, e.g. 1-5 or 6-10 or 1,3 (repeatable; "
        "default: the first half and the second half, reported apart)",
    )
    parser.add_argument("--embedder", choices=("local", "off"), default="local",
                        help="local: the offline multilingual-e5-small (default); off: keywords only")
    parser.add_argument("--threads", type=int, default=None, help="threads of the local model")
    parser.add_argument("--latency-sample", type=int, default=100,
                        help="hybrid searches timed with the live model (default 100)")
    parser.add_argument("--out", type=Path, default=RESULTS / "locomo.json")
    parser.add_argument("--cache", type=Path, default=RESULTS / "locomo-cache",
                        help="where vectors are kept between runs")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the workspaces in this (new) directory and keep them")
    qa = parser.add_argument_group(
        "question answering (--qa)",
        "ask each selected question through the agent with a model, beside two baselines "
        "(no memory; plain BM25's top 5 turns pasted before the question)",
    )
    qa.add_argument("--qa", action="store_true", help="question answering instead of retrieval")
    qa.add_argument("--endpoint", help="OpenAI-compatible base URL of the model, e.g. http://127.0.0.1:8081/v1")
    qa.add_argument("--model", help="model name at the endpoint")
    qa.add_argument("--api-key", help="API key for --endpoint (local servers need none)")
    qa.add_argument("--questions", type=int, default=None,
                    help="a seeded subset of this many questions, stratified by category (default all)")
    qa.add_argument("--categories", default="1,2,4", help="question categories (default 1,2,4)")
    qa.add_argument("--seed", type=int, default=7, help="seed of the subset (default 7)")
    qa.add_argument("--lifecycle", action="store_true",
                    help="also archive every session (/new) and run Dream through the endpoint first")
    qa.add_argument("--judge", help="OpenAI-compatible base URL of an LLM judge (also scores CORRECT/WRONG)")
    qa.add_argument("--judge-model", help="model name at the judge (default: --model)")
    qa.add_argument("--timeout", type=float, default=600.0, help="seconds per model request (default 600)")
    qa.add_argument("--attempts", type=int, default=1, help="attempts per model request (default 1)")
    qa.add_argument("--context-window", type=int, default=8192, help="contextWindowTokens (default 8192)")
    qa.add_argument("--max-tokens", type=int, default=128, help="tokens per reply (default 128)")
    qa.add_argument("--max-tool-iterations", type=int, default=4,
                    help="agents.defaults.maxToolIterations of the run (default 4)")
    qa.add_argument("--conditions", default=None,
                    help="which of 'hippobot', 'no memory', 'bm25 top 5' to ask, comma-separated (default all "
                         "three); a change of hippobot alone need not ask the baselines again")
    qa.add_argument("--results", type=Path, default=None,
                    help="JSONL of answered questions, read to resume (default: --out with .jsonl)")
    args = parser.parse_args(argv)
    if args.qa:
        return _qa(args, parser)
    try:
        dataset.load(args.data)  # a bad file is one line before anything else runs
        if args.keep is not None and args.keep.exists():
            raise dataset.DatasetError(f"--keep {args.keep}: already exists")
    except dataset.DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    embedder, problem = make_embedder(args.embedder, args.cache, args.threads)
    if problem:
        print(f"warning: {problem}; hybrid search is keyword search in this run", file=sys.stderr)
    try:
        report = run(args.data, args.conversations, embedder=embedder,
                     latency_sample=args.latency_sample, keep=args.keep, embedder_problem=problem)
    except dataset.DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for group in report["groups"]:
        print(format_table(group))
        print()
    write_json(report, args.out)
    return 0


def _qa(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .qa import main_qa

    if not args.endpoint or not args.model:
        parser.error("--qa needs --endpoint URL and --model NAME")
    if args.out == RESULTS / "locomo.json":
        args.out = RESULTS / "locomo-qa.json"
    try:
        conversations = dataset.load(args.data)
        for spec in args.conversations or ["1-5"]:
            dataset.select(conversations, spec)
    except dataset.DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.conditions is not None:
        from .qa import CONDITIONS

        wanted = tuple(c.strip() for c in args.conditions.split(",") if c.strip())
        unknown = [c for c in wanted if c not in CONDITIONS]
        if unknown or not wanted:
            parser.error(f"--conditions: choose among {', '.join(CONDITIONS)} (got {args.conditions!r})")
        args.conditions = wanted
    args.embedder_obj, problem = make_embedder(args.embedder, args.cache, args.threads)
    if problem:
        print(f"warning: {problem}; hippobot recalls by keywords in this run", file=sys.stderr)
    return main_qa(args, conversations)


if __name__ == "__main__":
    raise SystemExit(main())
