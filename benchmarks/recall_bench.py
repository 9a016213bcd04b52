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
    python benchmarks/recall_bench.py --semantic # BM25 vs hybrid: benchmarks/semantic_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from benchmarks.report import write_json
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


class Samples:
    """Wall-clock and CPU time of repeated operations. CPU time is reported too because
    the machine may be shared: it shows the work done, wall time what a user waits."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextmanager
    def measure(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)

    def summary(self) -> dict:
        cpu = _ms(self.cpu)
        return {**_ms(self.wall), "cpu_median_ms": cpu["median_ms"], "cpu_p95_ms": cpu["p95_ms"]}


def run(root: Path, *, small: bool) -> dict:
    sizes = (
        dict(history=2_000, sessions=20, per_session=200)
        if small
        else dict(history=50_000, sessions=500, per_session=1_000)
    )
    n_turns, n_queries = (50, 50) if small else (200, 200)
    load_before = os.getloadavg()[0]
    probe = time.perf_counter()
    for _ in range(2000):
        os.stat(__file__)
    stat_us = (time.perf_counter() - probe) / 2000 * 1e6
    started = time.perf_counter()
    info = build_workspace(root, **sizes)
    generate_s = time.perf_counter() - started

    index = RecallIndex(root, auto_sync=False)
    cpu = time.process_time()
    stats = index.rebuild()
    rebuild_cpu = time.process_time() - cpu
    db_bytes = sum(p.stat().st_size for p in index.path.parent.glob("recall.sqlite3*"))

    rng = random.Random(SEED + 2)
    corpus: Corpus = info["corpus"]

    def append_turn(i: int) -> Path:
        key = rng.choice(info["keys"])
        channel, chat = key.split(":")
        path = root / "sessions" / channel / f"{chat}.jsonl"
        now = datetime.now().isoformat(timespec="seconds")
        lines = [
            {"role": "user", "content": f"turn {i}: {corpus.text(5, 30)}", "timestamp": now},
            {"role": "assistant", "content": corpus.text(10, 60), "timestamp": now},
        ]
        with path.open("a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(m, ensure_ascii=False) + "\n" for m in lines)
        return path

    full, targeted, idle, plain, synced = Samples(), Samples(), Samples(), Samples(), Samples()
    for i in range(n_turns):
        append_turn(i)
        with full.measure():
            s = index.sync()
        assert s.docs_added == 2 and s.docs_removed == 0, s
    for i in range(n_turns):
        path = append_turn(n_turns + i)
        with targeted.measure():
            s = index.sync(paths=[path])
        assert s.docs_added == 2 and s.docs_removed == 0, s
    for _ in range(n_turns):
        with idle.measure():
            index.sync()

    qs = queries(corpus, n_queries)
    hit_counts = []
    for q in qs:
        with plain.measure():
            hits = index.search(q, k=8, session_key=info["keys"][0])
        hit_counts.append(len(hits))
    index.auto_sync = True
    for q in qs:
        with synced.measure():
            index.search(q, k=8)
    index.close()

    return {
        "workspace": {k: info[k] for k in ("history_entries", "sessions", "session_messages")},
        "generate_s": round(generate_s, 2),
        "rebuild": {
            "seconds": round(stats.seconds, 2),
            "cpu_seconds": round(rebuild_cpu, 2),
            "docs": stats.docs_added,
            "mb_read": round(stats.bytes_read / 1e6, 1),
            "index_mb": round(db_bytes / 1e6, 1),
        },
        "append_turn_sync": full.summary(),
        "append_turn_sync_paths": targeted.summary(),
        "idle_sync": idle.summary(),
        "query": {
            **plain.summary(),
            "queries": len(qs),
            "with_hits": sum(1 for c in hit_counts if c),
        },
        "query_with_auto_sync": synced.summary(),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
        "stat_call_us": round(stat_us, 2),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
    }


def _row(r: dict) -> str:
    return (
        f"median {r['median_ms']} ms, p95 {r['p95_ms']} ms "
        f"(CPU median {r['cpu_median_ms']} ms, p95 {r['cpu_p95_ms']} ms)"
    )


def table(r: dict) -> str:
    w, rb = r["workspace"], r["rebuild"]
    rows = [
        (
            "workspace",
            f"{w['history_entries']:,} history entries, {w['session_messages']:,} messages "
            f"in {w['sessions']} sessions",
        ),
        (
            "full rebuild",
            f"{rb['seconds']} s ({rb['cpu_seconds']} s CPU) for {rb['docs']:,} docs, "
            f"{rb['mb_read']} MB read, index {rb['index_mb']} MB",
        ),
        ("append turn + sync()", _row(r["append_turn_sync"])),
        ("append turn + sync(paths=[file])", _row(r["append_turn_sync_paths"])),
        ("sync(), nothing changed", _row(r["idle_sync"])),
        ("query, index synced", _row(r["query"])),
        ("query incl. auto sync()", _row(r["query_with_auto_sync"])),
        (
            "machine",
            f"{r['cpus']} CPUs, load average {r['load_average'][0]} → {r['load_average'][1]}, "
            f"one stat() {r['stat_call_us']} µs, "
            f"Python {r['python']}, SQLite {r['sqlite']}",
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
    parser.add_argument(
        "--semantic", action="store_true", help="run the semantic (hybrid) recall benchmark instead"
    )
    args = parser.parse_args(argv)
    if args.semantic:
        from benchmarks import semantic_bench

        return semantic_bench.main(["--small"] if args.small else [])
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
        write_json(result, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
