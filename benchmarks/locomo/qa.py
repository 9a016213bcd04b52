"""LoCoMo question answering, end to end: does the answer reach the user?

Each selected conversation is ingested into its own workspace as hippobot sessions
(:mod:`.ingest`, the same as the retrieval benchmark); with ``lifecycle`` every session is
also archived (``/new``: consolidation through the endpoint) and Dream runs once. Then each
selected question is asked in a fresh session through the agent's real path
(:meth:`hippobot.agent.api.Api.handle`, what ``hippobot agent -m`` calls), on the day after
the conversation's last session, and the reply is scored against the gold answer. The same
model and the same question prompt also answer two baselines, in an empty workspace:

* ``no memory``: the question alone;
* ``bm25 top 5``: plain BM25's five best turns (:class:`.retrieval.PlainBM25`, dated) pasted
  before the question.

Scores, per question: token F1 as LoCoMo's own evaluation computes it (lower case, no
punctuation, no articles nor "and", Porter stems; category 1 answers are lists: each gold part
scored against its best predicted part, averaged; category 3 keeps the gold answer before
";"), containment (the normalised gold answer appears in the normalised reply), and with a
judge endpoint an LLM's CORRECT/WRONG, as published results use.

Questions are a seeded subset stratified by category (``questions`` of categories 1, 2, 4 by
default), spread over the conversations. Every answered question is appended to a JSONL file
keyed by condition and question id, so an interrupted run resumes where it stopped; a
question whose request fails (the endpoint died, timed out) is recorded as failed, the run goes
on, and a later run asks it again. Each question's session is deleted after its answer, so
no question sees another's.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .dataset import CATEGORIES, Conversation, Question
from .ingest import Ingested, ingest
from .retrieval import CachedEmbedder, PlainBM25

__all__ = [
    "CONDITIONS",
    "QAOptions",
    "QuestionRef",
    "against_baselines",
    "contains",
    "format_report",
    "locomo_f1",
    "normalize_answer",
    "paired",
    "run_qa",
    "select_questions",
    "summarise",
]

CONDITIONS = ("hippobot", "no memory", "bm25 top 5")
DEFAULT_CATEGORIES = (1, 2, 4)
SEARCH_WAIT_S = 10.0  # recall.autoTimeoutS of the benchmark's workspaces (with vectors)
ASK = "{question} Answer with a short phrase, using the exact words of the conversations where you can."
BM25_CONTEXT = "Excerpts from earlier conversations:\n{lines}\n\n"
JUDGE_PROMPT = """You grade answers to questions about a long conversation.
Question: {question}
Gold answer: {gold}
Answer given: {reply}
Is the answer given correct? It is correct when it states the gold answer or something with
the same meaning (a date in another format, or a relative date that names the same time,
counts); it is wrong when it misses it, contradicts it or only says it does not know.
Reply with one word: CORRECT or WRONG."""


# --- scoring, as LoCoMo's evaluation does it ---------------------------------------------

_ARTICLES = re.compile(r"\b(?:a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, commas and punctuation removed, articles (and "and") removed, single
    spaces: LoCoMo's ``normalize_answer``."""
    text = text.replace(",", "").lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _stems(text: str) -> list[str]:
    try:
        from nltk.stem import PorterStemmer
    except ImportError as exc:  # pragma: no cover - a dev dependency
        raise SystemExit("LoCoMo's F1 stems with NLTK's Porter stemmer: pip install nltk") from exc
    stem = _stemmer(PorterStemmer)
    return [stem(w) for w in normalize_answer(text).split()]


_STEMMER: Any = None


def _stemmer(cls: Any) -> Callable[[str], str]:
    global _STEMMER
    if _STEMMER is None:
        _STEMMER = cls()
    return _STEMMER.stem  # type: ignore[no-any-return]


def _f1(prediction: str, gold: str) -> float:
    pred, truth = _stems(prediction), _stems(gold)
    same = sum((Counter(pred) & Counter(truth)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def gold_answer(question: Question) -> str:
    answer = question.answer or ""
    return answer.split(";")[0].strip() if question.category == 3 else answer


def locomo_f1(reply: str, question: Question) -> float:
    """Token F1 of ``reply`` against the gold answer, per LoCoMo's category rules."""
    gold = gold_answer(question)
    if question.category == 1:  # a list: each gold part against its best predicted part
        parts = [p.strip() for p in reply.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return sum(max(_f1(p, g) for p in parts) for g in golds) / len(golds)
    return _f1(reply, gold)


def contains(reply: str, question: Question) -> bool:
    """Whether the normalised gold answer appears, word for word, in the normalised reply."""
    gold = normalize_answer(gold_answer(question))
    return bool(gold) and f" {gold} " in f" {normalize_answer(reply)} "


# --- which questions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuestionRef:
    conversation: Conversation
    number: int  # position among the conversation's questions with evidence
    question: Question

    @property
    def id(self) -> str:
        return f"{self.conversation.sample_id}:q{self.number}"


def select_questions(
    conversations: Sequence[Conversation],
    count: int | None,
    categories: Sequence[int] = DEFAULT_CATEGORIES,
    seed: int = 7,
) -> list[QuestionRef]:
    """``count`` questions (all when None) of ``categories``, stratified: each category gets
    its share of ``count`` (largest remainder), drawn with ``seed`` round-robin over the
    conversations, so every conversation and category is represented. Returned in
    conversation order, then question order."""
    pool: dict[int, list[list[QuestionRef]]] = {}
    for conv in conversations:
        for cat in categories:
            refs = [QuestionRef(conv, i, q) for i, q in enumerate(conv.questions) if q.category == cat]
            pool.setdefault(cat, []).append(refs)
    sizes = {cat: sum(len(r) for r in per) for cat, per in pool.items()}
    total = sum(sizes.values())
    if count is None or count >= total:
        wanted = sizes
    else:
        exact = {cat: count * n / total for cat, n in sizes.items()}
        wanted = {cat: int(x) for cat, x in exact.items()}
        for cat in sorted(exact, key=lambda c: exact[c] - wanted[c], reverse=True)[: count - sum(wanted.values())]:
            wanted[cat] += 1
    rng = random.Random(seed)
    chosen: list[QuestionRef] = []
    for cat in sorted(pool):
        per = [rng.sample(refs, len(refs)) for refs in pool[cat]]
        picked = 0
        while picked < wanted[cat]:
            for refs in per:
                if refs and picked < wanted[cat]:
                    chosen.append(refs.pop())
                    picked += 1
    order = {c.sample_id: i for i, c in enumerate(conversations)}
    return sorted(chosen, key=lambda r: (order[r.conversation.sample_id], r.number))


# --- running -------------------------------------------------------------------------------


@dataclass(slots=True)
class QAOptions:
    endpoint: str
    model: str
    api_key: str = "sk-locomo-not-needed"
    timeout: float = 600.0
    attempts: int = 1
    context_window: int = 8192
    max_tokens: int = 128
    max_tool_iterations: int = 4  # a small model looping on memory_get must not stall the run
    conditions: tuple[str, ...] = CONDITIONS
    lifecycle: bool = False
    judge: str | None = None
    judge_model: str | None = None
    judge_key: str = "sk-locomo-not-needed"
    embedder: CachedEmbedder | None = None
    results: Path = Path("locomo-qa.jsonl")
    work: Path | None = None
    progress: Callable[[str], None] = lambda _m: None


@dataclass(slots=True)
class _Place:
    """One condition's workspace for one conversation, and its front door."""

    api: Any
    agent: Any
    by_citation: dict[str, str] = field(default_factory=dict)  # citation -> LoCoMo turn


def _settings(home: Path, workspace: Path, opts: QAOptions, *, semantic: bool) -> Any:
    from hippobot.cli.onboard import onboard
    from hippobot.config import load_settings

    home.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {}
    if semantic:
        # Answers are what is measured here, not latency: on a busy machine the local model
        # may take seconds per query, which the default time budget would not wait for.
        config["recall"] = {"embeddings": {"provider": "local"}, "autoTimeoutS": SEARCH_WAIT_S}
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    env = {
        "HIPPOBOT_HOME": str(home),
        "HIPPOBOT_API_BASE": opts.endpoint,
        "HIPPOBOT_MODEL": opts.model,
        "HIPPOBOT_API_KEY": opts.api_key,
    }
    settings = load_settings(env, workspace=workspace).with_defaults(
        context_window_tokens=opts.context_window, max_tokens=opts.max_tokens,
        max_tool_iterations=opts.max_tool_iterations,
    )  # fmt: skip
    onboard(settings)
    return settings


def _open(settings: Any, opts: QAOptions, now: datetime) -> _Place:
    from hippobot.agent.agent import Agent
    from hippobot.agent.api import Api
    from hippobot.context import tokens
    from hippobot.providers.factory import make_provider
    from hippobot.providers.retry import RetryPolicy
    from hippobot.usage_ledger import UsageLedger

    target = settings.model_target()
    provider = make_provider(
        target.kind, api_key=target.api_key, api_base=target.api_base,
        extra_headers=target.extra_headers, timeout=opts.timeout,
        retry=RetryPolicy(max_attempts=opts.attempts), name=target.provider,
        usage=UsageLedger.for_workspace(settings.workspace),
        estimate=lambda r: tokens.count_messages(r.messages) + tokens.count_tools(r.tools),
    )  # fmt: skip
    agent = Agent(settings, provider=provider, now=lambda: now)
    return _Place(Api.for_agent(agent), agent)


def _fill_vectors(workspace: Path, embedder: CachedEmbedder) -> None:
    """Give every ingested message its vector now, from the cache where it can (the index
    then holds what a workspace that had been running a while would hold)."""
    from hippobot.recall import RecallIndex

    with RecallIndex(workspace, embedder=embedder) as index:
        index.embed_pending(max_docs=10**9, batch_size=64)
    embedder.save()


@dataclass(slots=True)
class _Record:
    condition: str
    id: str
    category: int
    question: str
    gold: str
    reply: str = ""
    f1: float = 0.0
    contains: bool = False
    judge: bool | None = None
    error: str | None = None
    seconds: float = 0.0
    tool_calls: int = 0
    recalled: list[str] = field(default_factory=list)  # citations recalled (hippobot)
    recall_mode: str | None = None  # hybrid | keyword | timeout | failed (hippobot)
    evidence: list[str] = field(default_factory=list)
    evidence_recalled: bool | None = None  # an evidence turn among them

    def key(self) -> str:
        return f"{self.condition}|{self.id}"


def load_results(path: Path) -> dict[str, dict[str, Any]]:
    """The latest record per condition and question of an earlier run (torn lines skipped)."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "condition" in rec and "id" in rec:
            done[f"{rec['condition']}|{rec['id']}"] = rec
    return done


def _answered(record: dict[str, Any] | None) -> bool:
    """Whether the question was answered: a failed request was not (a later run asks it
    again, and the scores leave it out); a failed judge still leaves the answer."""
    return record is not None and (not record.get("error") or str(record["error"]).startswith("judge"))


def _append(path: Path, record: _Record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")
        fh.flush()


def bm25_lines(conv: Conversation, data: Ingested, question: str, k: int = 5) -> str:
    starts = {s.number: s.started for s in conv.sessions}
    bm25 = PlainBM25([t for _, t in data.docs])
    scores = bm25.scores(question)
    best = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    lines = []
    for i in best:
        dia_id, text = data.docs[i]
        session, _, turn = dia_id[1:].partition(":")
        when = starts[int(session)] + timedelta(minutes=int(turn) - 1)
        lines.append(f"- [{when:%Y-%m-%d %H:%M}] {text}")
    return "\n".join(lines)


async def _judge(opts: QAOptions, question: Question, reply: str) -> bool | None:
    import httpx

    body = {
        "model": opts.judge_model or opts.model,
        "messages": [{"role": "user", "content": JUDGE_PROMPT.format(
            question=question.text, gold=gold_answer(question), reply=reply)}],
        "max_tokens": 5,
        "temperature": 0,
    }  # fmt: skip
    async with httpx.AsyncClient(timeout=opts.timeout) as client:
        response = await client.post(
            opts.judge.rstrip("/") + "/chat/completions",  # type: ignore[union-attr]
            json=body, headers={"Authorization": f"Bearer {opts.judge_key}"},
        )
        response.raise_for_status()
        verdict = response.json()["choices"][0]["message"]["content"] or ""
    word = verdict.strip().upper()
    return True if word.startswith("CORRECT") else False if word.startswith("WRONG") else None


async def _ask(place: _Place, ref: QuestionRef, condition: str, prompt: str, opts: QAOptions) -> _Record:
    q = ref.question
    record = _Record(condition, ref.id, q.category, q.text, gold_answer(q), evidence=list(q.evidence))
    key = f"qa:{condition.replace(' ', '-')}-{ref.id.replace(':', '-')}"
    started = time.monotonic()
    try:
        result = await place.api.handle(key, prompt)
    except Exception as exc:  # one failed question, never the run
        record.error = f"{type(exc).__name__}: {exc}"[:500]
        record.seconds = round(time.monotonic() - started, 2)
        return record
    finally:
        messages = place.agent.sessions.get(key).messages
        marker = messages[0].get("_recall") if messages else None
        record.recall_mode = marker.get("mode") if isinstance(marker, dict) else None
        await _forget(place, key)
    record.seconds = round(time.monotonic() - started, 2)
    record.reply = result.reply
    record.tool_calls = result.run.tool_calls if result.run is not None else 0
    record.f1 = round(locomo_f1(result.reply, q), 4)
    record.contains = contains(result.reply, q)
    recalled = place.agent.recalled_lines(key) if condition == "hippobot" else []
    record.recalled = [ln.split("]", 1)[0].lstrip("- [").split(",")[0] for ln in recalled]
    if condition == "hippobot":
        record.evidence_recalled = any(place.by_citation.get(c) in q.evidence for c in record.recalled)
    if opts.judge:
        try:
            record.judge = await _judge(opts, q, result.reply)
        except Exception as exc:
            record.error = f"judge failed: {type(exc).__name__}: {exc}"[:500]
    return record


async def _forget(place: _Place, key: str) -> None:
    """The question's session goes, so no later question finds it (nor its answer)."""
    try:
        await place.api.delete_session(key)
    except Exception:  # no session was made (the request failed first)
        pass


async def _archive_and_dream(place: _Place, conv: Conversation, progress: Callable[[str], None]) -> None:
    from .ingest import session_key

    for lsession in conv.sessions:
        await place.api.handle(session_key(conv, lsession.number), "/new")
        await place.agent.jobs.drain(None)
    progress(f"{conv.sample_id}: archived {len(conv.sessions)} sessions; Dream…")
    result = await place.agent.dream.run()
    progress(f"{conv.sample_id}: {result.describe().splitlines()[0]}")


async def run_qa(refs: Sequence[QuestionRef], opts: QAOptions) -> list[dict[str, Any]]:
    """Ask every question of ``refs`` under every condition of ``opts`` (skipping what the
    results file holds already); returns every record of the selection."""
    done = load_results(opts.results)
    work = opts.work or Path(tempfile.mkdtemp(prefix="locomo-qa-"))
    work.mkdir(parents=True, exist_ok=True)
    by_conv: dict[str, list[QuestionRef]] = {}
    convs: dict[str, Conversation] = {}
    for ref in refs:
        by_conv.setdefault(ref.conversation.sample_id, []).append(ref)
        convs[ref.conversation.sample_id] = ref.conversation
    try:
        for sample_id, conv_refs in by_conv.items():
            conv = convs[sample_id]
            now = (max(s.started for s in conv.sessions) + timedelta(days=1)).astimezone()
            data: Ingested | None = None
            # One condition after another: each keeps its prompt prefix from question to
            # question, which a local server's prompt cache reuses.
            for condition in opts.conditions:
                todo = [r for r in conv_refs if not _answered(done.get(f"{condition}|{r.id}"))]
                if not todo:
                    continue
                if data is None:
                    data = ingest(conv, work / sample_id / "workspace")
                place = await _place(condition, conv, data, work, opts, now)
                try:
                    for ref in todo:
                        prompt = ASK.format(question=ref.question.text)
                        if condition == "bm25 top 5":
                            prompt = BM25_CONTEXT.format(lines=bm25_lines(conv, data, ref.question.text)) + prompt
                        record = await _ask(place, ref, condition, prompt, opts)
                        _append(opts.results, record)
                        done[record.key()] = asdict(record)
                        status = "FAILED " + (record.error or "") if record.error else f"F1 {record.f1:.2f}"
                        opts.progress(f"{condition:<10} {ref.id:<14} {status[:90]}  {record.reply[:60]!r}")
                finally:
                    await place.api.aclose(timeout=60)
    finally:
        if opts.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return [done[f"{c}|{r.id}"] for c in opts.conditions for r in refs if f"{c}|{r.id}" in done]


async def _place(
    condition: str, conv: Conversation, data: Ingested, work: Path, opts: QAOptions, now: datetime
) -> _Place:
    if condition == "hippobot":
        if opts.embedder is not None:
            _fill_vectors(data.workspace, opts.embedder)
        settings = _settings(work / conv.sample_id / "home", data.workspace, opts,
                             semantic=opts.embedder is not None)  # fmt: skip
        place = _open(settings, opts, now)
        place.by_citation = data.by_citation
        if opts.lifecycle and not (work / conv.sample_id / "lifecycle-done").exists():
            await _archive_and_dream(place, conv, opts.progress)
            (work / conv.sample_id / "lifecycle-done").touch()
        return place
    empty = work / "baseline"
    settings = _settings(empty / "home", empty / "workspace", opts, semantic=False)
    return _open(settings, opts, now)


# --- the report ----------------------------------------------------------------------------


def summarise(records: Sequence[dict[str, Any]], conditions: Sequence[str]) -> dict[str, Any]:
    """Per condition: overall and per category, questions, failures, mean F1, containment and
    judge share (over the questions answered)."""
    out: dict[str, Any] = {}
    for condition in conditions:
        rows = [r for r in records if r["condition"] == condition]
        parts: dict[str, Any] = {}
        for name, group in [("all", rows), *[(CATEGORIES[c], [r for r in rows if r["category"] == c])
                                              for c in sorted({r["category"] for r in rows})]]:  # fmt: skip
            ok = [r for r in group if _answered(r)]
            judged = [r for r in ok if r.get("judge") is not None]
            parts[name] = {
                "questions": len(group),
                "failed": len(group) - len(ok),
                "f1": round(sum(r["f1"] for r in ok) / len(ok), 4) if ok else None,
                "contains": round(sum(bool(r["contains"]) for r in ok) / len(ok), 4) if ok else None,
                "judge": round(sum(bool(r["judge"]) for r in judged) / len(judged), 4) if judged else None,
            }
            if condition == "hippobot":
                seen = [r for r in ok if r.get("evidence_recalled") is not None]
                parts[name]["evidence_recalled"] = (
                    round(sum(bool(r["evidence_recalled"]) for r in seen) / len(seen), 4) if seen else None
                )
        out[condition] = parts
    return out


def against_baselines(records: Sequence[dict[str, Any]], conditions: Sequence[str]) -> dict[str, Any]:
    """hippobot :func:`paired` with each other condition of the run that shares questions."""
    if "hippobot" not in conditions:
        return {}
    found = {other: paired(records, "hippobot", other) for other in conditions if other != "hippobot"}
    return {other: p for other, p in found.items() if p["questions"]}


def paired(
    records: Sequence[dict[str, Any]], first: str, second: str, *, rounds: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """``first`` against ``second`` on the questions both answered: the mean F1 difference
    with a 95% paired bootstrap interval (questions resampled, ``seed`` fixed, so a report
    is reproducible), and how many questions only one of them contains the answer of.

    On 100 questions a few replies move the mean by a few hundredths; the interval says
    whether a lead is more than that (it is one run of the model, not every run)."""
    by_id = {r["id"]: r for r in records if r["condition"] == second and _answered(r)}
    pairs = [(r, by_id[r["id"]]) for r in records if r["condition"] == first and _answered(r) and r["id"] in by_id]
    if not pairs:
        return {"questions": 0}
    diffs = [a["f1"] - b["f1"] for a, b in pairs]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(rounds))
    return {
        "questions": len(pairs),
        "f1_difference": round(sum(diffs) / len(diffs), 4),
        "f1_ci95": [round(means[int(0.025 * rounds)], 4), round(means[int(0.975 * rounds) - 1], 4)],
        "contains_only_first": sum(bool(a["contains"]) and not b["contains"] for a, b in pairs),
        "contains_only_second": sum(bool(b["contains"]) and not a["contains"] for a, b in pairs),
    }


def format_report(summary: dict[str, Any], label: str, compared: dict[str, Any] | None = None) -> str:
    cats = [c for c in ("multi-hop", "temporal", "open-domain", "single-hop")
            if any(c in parts for parts in summary.values())]  # fmt: skip
    lines = [
        f"LoCoMo question answering, {label}",
        f"{'condition':<12}{'n':>5}{'failed':>7}{'F1':>7}{'contains':>9}{'judge':>7}   F1 by category: "
        + " ".join(f"{c:>11}" for c in cats),
    ]

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for condition, parts in summary.items():
        a = parts["all"]
        row = (f"{condition:<12}{a['questions']:>5}{a['failed']:>7}{num(a['f1']):>7}{num(a['contains']):>9}"
               f"{num(a['judge']):>7}   {'':16}")  # fmt: skip
        row += " ".join(f"{num(parts[c]['f1']) if c in parts else '-':>11}" for c in cats)
        lines.append(row)
    hippo = summary.get("hippobot", {}).get("all", {})
    if hippo.get("evidence_recalled") is not None:
        lines.append(f"hippobot: an evidence turn was among the memory recalled for {hippo['evidence_recalled']:.1%} of the questions")
    for other, p in (compared or {}).items():
        lo, hi = p["f1_ci95"]
        lines.append(
            f"hippobot - {other}: F1 {p['f1_difference']:+.3f} (95% interval {lo:+.3f} to {hi:+.3f}, paired bootstrap "
            f"over {p['questions']} questions); answer contained only by hippobot in {p['contains_only_first']}, "
            f"only by {other} in {p['contains_only_second']}"
        )
    return "\n".join(lines)


def _log(message: str) -> None:
    sys.stderr.write(f"[locomo-qa {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def main_qa(args: Any, conversations: list[Conversation]) -> int:
    """``python -m benchmarks.locomo --qa …`` (arguments parsed by ``__main__``)."""
    from benchmarks.report import write_json

    from . import dataset

    specs = args.conversations or ["1-5"]
    selected = [c for spec in specs for c in dataset.select(conversations, spec)]
    seen: set[str] = set()
    selected = [c for c in selected if not (c.sample_id in seen or seen.add(c.sample_id))]
    categories = tuple(int(c) for c in args.categories.split(","))
    refs = select_questions(selected, args.questions, categories, args.seed)
    results = args.results or Path(args.out).with_suffix(".jsonl")
    opts = QAOptions(
        endpoint=args.endpoint, model=args.model, api_key=args.api_key or "sk-locomo-not-needed",
        timeout=args.timeout, attempts=args.attempts, context_window=args.context_window,
        max_tokens=args.max_tokens, max_tool_iterations=args.max_tool_iterations,
        lifecycle=args.lifecycle, judge=args.judge,
        judge_model=args.judge_model, embedder=args.embedder_obj, results=results,
        work=args.keep, progress=_log, conditions=getattr(args, "conditions", None) or CONDITIONS,
    )  # fmt: skip
    _log(f"{len(refs)} questions of {len(selected)} conversations x {len(opts.conditions)} conditions; "
         f"results in {results}")  # fmt: skip
    records = asyncio.run(run_qa(refs, opts))
    summary = summarise(records, opts.conditions)
    compared = against_baselines(records, opts.conditions)
    label = (f"conversations {', '.join(specs)}: {len(refs)} questions (categories "
             f"{args.categories}, seed {args.seed}), model {args.model}")  # fmt: skip
    print(format_report(summary, label, compared))
    write_json({"label": label, "model": args.model, "endpoint": args.endpoint,
                "embedder": opts.embedder.name if opts.embedder else None, "lifecycle": args.lifecycle,
                "summary": summary, "against_baselines": compared, "records": records}, Path(args.out))  # fmt: skip
    failed = sum(1 for r in records if not _answered(r))
    return 1 if failed else 0
