"""Benchmark of the recall index on a synthetic workspace.

Builds a workspace (default: 50,000 history entries and 500,000 session messages in 500
sessions, fixed seed), then measures:

* full rebuild time and index size;
* incremental update per appended turn: append a user and an assistant message to a random
  session, then ``sync()`` (median / p95 over 200 turns); and ``sync()`` with nothing
  changed;
* query latency over 200 varied queries (English words and pairs, rare words, Chinese,
  stop-word-heavy questions, hostile syntax): p50 / p95, with the index already synced,
  and again including the per-search ``sync()``.

Usage::

    python benchmarks/recall_bench.py            # full run, writes benchmarks/results/recall.json
    python benchmarks/recall_bench.py --small    # smoke run in a few seconds, writes nothing
    python benchmarks/recall_bench.py --out FILE --keep DIR
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hippobot.recall import RecallIndex

SEED = 20260403


def _words(text: str) -> list[str]:
    return text.split()


RESULTS = Path(__file__).parent / "results" / "recall.json"

TOPICS = _words("""
database postgres sqlite migration schema index query backup replica latency timeout
garden tomato basil compost watering seedlings greenhouse harvest pruning mulch
travel flight hotel passport visa itinerary train airport luggage booking lisbon kyoto
berlin recipe dinner vegetarian pasta curry bread oven dessert allergy peanuts coffee
tea budget invoice salary taxes mortgage savings pension receipt refund subscription
meeting deadline release roadmap sprint review deploy rollback incident monitoring
python rust typescript compiler refactor test coverage lint docker kubernetes nginx
cat dog vet walk luna biscuit birthday anniversary gift party wedding concert tickets
running marathon gym yoga sleep doctor dentist appointment prescription vitamins
novel podcast album guitar piano lesson chess puzzle photography camera lens editing
""")
COMMON = _words("""the a to and of in is it you that for on with this be are as at we can
have not will your i my was but so if or do about from what there just like more
""")
CHINESE = _words("""用户 喜欢 深色 模式 数据库 迁移 备份 旅行 机票 酒店 护照 晚餐 素食 咖啡 预算
发票 会议 截止 发布 测试 部署 猫 狗 生日 礼物 音乐会 跑步 睡眠 医生 预约 小说 吉他 摄影
花园 番茄 浇水 收获 项目 代码 服务器 超时 索引 查询 日志 监控 周末 计划 提醒""")


@dataclass
class Corpus:
    words: list[str]
    cum: list[float]
    rng: random.Random

    @classmethod
    def build(cls, rng: random.Random, size: int = 20_000) -> Corpus:
        syllables = [
            "ka",
            "lo",
            "mi",
            "ren",
            "to",
            "sa",
            "vel",
            "qu",
            "dor",
            "an",
            "is",
            "el",
            "mar",
            "tin",
            "po",
            "ra",
            "zu",
            "bex",
            "ny",
            "os",
        ]
        invented = {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(size)}
        words = COMMON + TOPICS + sorted(invented)
        # Zipf-like weights: a few very common words, a long tail of rare ones.
        weights = [1.0 / (rank + 1) ** 1.05 for rank in range(len(words))]
        cum, total = [], 0.0
        for w in weights:
            total += w
            cum.append(total)
        return cls(words, cum, rng)

    def sentence(self, lo: int, hi: int) -> str:
        n = self.rng.randint(lo, hi)
        words = self.rng.choices(self.words, cum_weights=self.cum, k=n)
        words[0] = words[0].capitalize()
        return " ".join(words) + "."

    def chinese(self, lo: int, hi: int) -> str:
        return "".join(self.rng.choices(CHINESE, k=self.rng.randint(lo, hi))) + "。"

    def text(self, lo: int, hi: int) -> str:
        return self.chinese(lo // 2, hi // 2) if self.rng.random() < 0.1 else self.sentence(lo, hi)


def _ts(start: datetime, span_days: float, frac: float, fmt: str) -> str:
    return (start + timedelta(days=span_days * frac)).strftime(fmt)


def build_workspace(root: Path, *, history: int, sessions: int, per_session: int) -> dict:
    """Write the synthetic workspace; returns what was written."""
    rng = random.Random(SEED)
    corpus = Corpus.build(rng)
    start = datetime.now() - timedelta(days=365)
    (root / "memory").mkdir(parents=True)
    keys = []
    with (root / "memory" / "history.jsonl").open("w", encoding="utf-8") as fh:
        for cursor in range(1, history + 1):
            key = f"cli:chat{rng.randrange(sessions)}"
            facts = "\n".join(f"- {corpus.text(6, 18)}" for _ in range(rng.randint(1, 4)))
            entry = {
                "cursor": cursor,
                "timestamp": _ts(start, 365, cursor / history, "%Y-%m-%d %H:%M"),
                "content": facts,
                "session_key": key,
            }
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
    channels = ["cli", "telegram", "slack", "discord", "feishu"]
    for s in range(sessions):
        key = f"{channels[s % len(channels)]}:chat{s}"
        keys.append(key)
        path = root / "sessions" / key.split(":")[0] / f"chat{s}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps(
                {"_type": "session", "format": 1, "key": key, "created_at": start.isoformat()}
            )
        ]
        for i in range(per_session):
            lines.append(
                json.dumps(
                    _message(corpus, rng, i, _ts(start, 365, i / per_session, "%Y-%m-%dT%H:%M:%S")),
                    ensure_ascii=False,
                )
            )
            if i % 100 == 99:
                lines.append(json.dumps({"_type": "meta", "last_consolidated": i}))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n" + "\n".join(f"- {corpus.sentence(5, 12)}" for _ in range(80)) + "\n",
        encoding="utf-8",
    )
    (root / "USER.md").write_text("# User\n\n" + corpus.sentence(10, 20) + "\n", encoding="utf-8")
    return {
        "history_entries": history,
        "sessions": sessions,
        "session_messages": sessions * per_session,
        "keys": keys,
        "corpus": corpus,
    }


def _message(corpus: Corpus, rng: random.Random, i: int, ts: str) -> dict:
    role = ("user", "assistant")[i % 2]
    if role == "assistant" and rng.random() < 0.08:
        args = json.dumps({"command": f"grep -r {rng.choice(TOPICS)} notes/"})
        return {
            "role": "assistant",
            "content": None,
            "timestamp": ts,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "exec", "arguments": args}}
            ],
        }
    if rng.random() < 0.05:
        return {
            "role": "tool",
            "content": corpus.text(30, 120),
            "tool_call_id": f"c{i}",
            "name": "exec",
            "timestamp": ts,
        }
    return {"role": role, "content": corpus.text(5, 40), "timestamp": ts}


def queries(corpus: Corpus, n: int) -> list[str]:
    rng = random.Random(SEED + 1)
    mid = corpus.words[len(COMMON) : len(COMMON) + 2000]
    rare = corpus.words[-5000:]
    makers = [
        lambda: rng.choice(TOPICS),
        lambda: f"{rng.choice(TOPICS)} {rng.choice(TOPICS)}",
        lambda: f"{rng.choice(mid)} {rng.choice(mid)}",
        lambda: rng.choice(rare),
        lambda: "".join(rng.sample(CHINESE, 2)),
        lambda: rng.choice(CHINESE),
        lambda: f"what did we decide about the {rng.choice(TOPICS)}",
        lambda: f"when is my {rng.choice(TOPICS)} {rng.choice(TOPICS)} appointment",
        lambda: rng.choice(['"unbalanced', "NEAR(", ")(", "AND OR", "'; DROP TABLE", "*"]),
        lambda: rng.choice(COMMON),
    ]
    return [makers[i % len(makers)]() for i in range(n)]


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _ms(values: list[float]) -> dict:
    return {
        "median_ms": round(statistics.median(values) * 1000, 3),
        "p95_ms": round(_pct(values, 95) * 1000, 3),
        "max_ms": round(max(values) * 1000, 3),
    }


def run(root: Path, *, small: bool) -> dict:
    sizes = (
        dict(history=2_000, sessions=20, per_session=200)
        if small
        else dict(history=50_000, sessions=500, per_session=1_000)
    )
    n_turns, n_queries = (50, 50) if small else (200, 200)
    started = time.perf_counter()
    info = build_workspace(root, **sizes)
    generate_s = time.perf_counter() - started

    index = RecallIndex(root, auto_sync=False)
    stats = index.rebuild()
    db_bytes = sum(p.stat().st_size for p in index.path.parent.glob("recall.sqlite3*"))

    rng = random.Random(SEED + 2)
    corpus: Corpus = info["corpus"]

    def append_turn(i: int) -> Path:
        key = rng.choice(info["keys"])
        channel, chat = key.split(":")
        path = root / "sessions" / channel / f"{chat}.jsonl"
        now = datetime.now().isoformat(timespec="seconds")
        with path.open("a", encoding="utf-8") as fh:
            for role, text in (
                ("user", f"turn {i}: {corpus.text(5, 30)}"),
                ("assistant", corpus.text(10, 60)),
            ):
                fh.write(
                    json.dumps(
                        {"role": role, "content": text, "timestamp": now}, ensure_ascii=False
                    )
                    + "\n"
                )
        return path

    turn_times, targeted_times = [], []
    for i in range(n_turns):
        append_turn(i)
        t = time.perf_counter()
        s = index.sync()
        turn_times.append(time.perf_counter() - t)
        assert s.docs_added == 2 and s.docs_removed == 0, s
    for i in range(n_turns):
        path = append_turn(n_turns + i)
        t = time.perf_counter()
        s = index.sync(paths=[path])
        targeted_times.append(time.perf_counter() - t)
        assert s.docs_added == 2 and s.docs_removed == 0, s
    idle_times = []
    for _ in range(n_turns):
        t = time.perf_counter()
        index.sync()
        idle_times.append(time.perf_counter() - t)

    qs = queries(corpus, n_queries)
    query_times, hit_counts = [], []
    for q in qs:
        t = time.perf_counter()
        hits = index.search(q, k=8, session_key=info["keys"][0])
        query_times.append(time.perf_counter() - t)
        hit_counts.append(len(hits))
    index.auto_sync = True
    synced_times = []
    for q in qs:
        t = time.perf_counter()
        index.search(q, k=8)
        synced_times.append(time.perf_counter() - t)
    index.close()

    return {
        "workspace": {k: info[k] for k in ("history_entries", "sessions", "session_messages")},
        "generate_s": round(generate_s, 2),
        "rebuild": {
            "seconds": round(stats.seconds, 2),
            "docs": stats.docs_added,
            "mb_read": round(stats.bytes_read / 1e6, 1),
            "index_mb": round(db_bytes / 1e6, 1),
        },
        "append_turn_sync": _ms(turn_times),
        "append_turn_sync_paths": _ms(targeted_times),
        "idle_sync": _ms(idle_times),
        "query": {
            **_ms(query_times),
            "queries": len(qs),
            "with_hits": sum(1 for c in hit_counts if c),
        },
        "query_with_auto_sync": _ms(synced_times),
        "python": sys.version.split()[0],
    }


def table(r: dict) -> str:
    w = r["workspace"]
    rows = [
        (
            "workspace",
            f"{w['history_entries']:,} history entries, {w['session_messages']:,} messages "
            f"in {w['sessions']} sessions",
        ),
        (
            "full rebuild",
            f"{r['rebuild']['seconds']} s for {r['rebuild']['docs']:,} docs "
            f"({r['rebuild']['mb_read']} MB read, index {r['rebuild']['index_mb']} MB)",
        ),
        (
            "append turn + sync",
            f"median {r['append_turn_sync']['median_ms']} ms, "
            f"p95 {r['append_turn_sync']['p95_ms']} ms",
        ),
        (
            "append turn + sync(paths=[file])",
            f"median {r['append_turn_sync_paths']['median_ms']} ms, "
            f"p95 {r['append_turn_sync_paths']['p95_ms']} ms",
        ),
        (
            "sync, nothing changed",
            f"median {r['idle_sync']['median_ms']} ms, p95 {r['idle_sync']['p95_ms']} ms",
        ),
        (
            "query (synced index)",
            f"p50 {r['query']['median_ms']} ms, p95 {r['query']['p95_ms']} ms, "
            f"max {r['query']['max_ms']} ms ({r['query']['with_hits']}/{r['query']['queries']} "
            "with hits)",
        ),
        (
            "query incl. sync()",
            f"p50 {r['query_with_auto_sync']['median_ms']} ms, "
            f"p95 {r['query_with_auto_sync']['p95_ms']} ms",
        ),
    ]
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"{a:<{width}}  {b}" for a, b in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="quick smoke run")
    parser.add_argument(
        "--out", type=Path, help="JSON results file (full run default: results/recall.json)"
    )
    parser.add_argument("--keep", type=Path, help="build the workspace here and keep it")
    args = parser.parse_args(argv)
    out = args.out or (None if args.small else RESULTS)
    tmp = None
    if args.keep:
        root = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="recall-bench-")
        root = Path(tmp) / "workspace"
    try:
        result = run(root, small=args.small)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(result))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
