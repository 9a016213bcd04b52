"""The benchmark's building blocks measure what they claim (no timings asserted)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from benchmarks.bench_model import classify, common_prefix
from benchmarks.coldstart import parse_importtime
from benchmarks.report import cache_summary, percentile
from benchmarks.workload import KEY, Workload, prepare_home

from hippobot.session.store import JsonlSessionStore


def test_common_prefix_matches_a_plain_scan() -> None:
    rng = random.Random(7)
    for _ in range(200):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(0, 40)))
        b = a[: rng.randint(0, len(a))] + "".join(rng.choice("ab") for _ in range(rng.randint(0, 5)))
        naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == naive


def test_requests_are_classified_by_what_they_ask() -> None:
    turn = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    assert classify(turn) == "turn"
    assert classify([*turn, {"role": "assistant", "content": None},
                     {"role": "tool", "content": "r"}]) == "turn-tool"
    archive = [*turn, {"role": "user", "content": "[Memory archive request — x"}]
    assert classify(archive) == "consolidation"
    assert classify([{"role": "user", "content": "guide\n## Task: analysis\n..."}]) == "dream-analysis"
    assert classify([{"role": "user", "content": "## Task: apply the findings"},
                     {"role": "assistant", "content": "ok"}]) == "dream-edit"


def test_cache_drops_are_attributed_to_lifecycle_requests_or_not() -> None:
    def req(kind: str, reuse: float | None) -> dict:
        return {"kind": kind, "turn": 0, "reuse": reuse, "reuse_recent": reuse,
                "extends_previous": bool(reuse and reuse > 0.9)}

    summary = cache_summary([req("turn", None), req("turn", 0.99), req("consolidation", 0.98),
                             req("turn", 0.1), req("turn", 0.2)])
    assert summary["below_50"] == 2
    assert summary["below_50_outside_lifecycle"] == 1  # turn -> turn at 0.2 has no excuse
    assert summary["turn_to_turn_pairs"] == 2


def test_percentile_is_nearest_rank() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == 5.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_importtime_is_summed_per_top_level_package() -> None:
    text = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:       100 |        100 |     json.decoder",
        "import time:       200 |       1300 |   json",
        "import time:       300 |       2000 | openai",
        "import time:        50 |         50 | openai.types",
    ])
    totals = parse_importtime(text)
    assert totals["openai"] == pytest.approx(0.00205)
    assert "json" not in totals  # nested under another import, not top level


def test_pregenerated_session_loads_like_a_real_one(tmp_path: Path) -> None:
    made = prepare_home(tmp_path / "home", 400, context_window=128_000, workload=Workload(),
                        index=False)
    workspace = tmp_path / "home" / "workspace"
    session = JsonlSessionStore(workspace).load(KEY)
    assert session is not None and len(session.messages) == made.messages == 800
    assert session.last_consolidated == made.last_consolidated > 0
    assert session.usage and session.usage.messages_at == 800
    assert session.messages[0]["content"].count("[Runtime Context") == 1
    history = [json.loads(line) for line in
               (workspace / "memory" / "history.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(history) == made.history_entries
    assert history[-1]["source"]["to"] == made.last_consolidated
    config = (tmp_path / "home" / "config.json").read_text(encoding="utf-8")
    assert '"contextWindowTokens": 128000' in config
