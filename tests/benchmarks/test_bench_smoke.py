"""The benchmark suite runs end to end (``python -m benchmarks --quick``) and writes its JSON.

No timing is asserted here: numbers depend on the machine. This only pins that the command a
reader of docs/performance.md would run still works and reports every section.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # As a reader runs it: from the repository's root, nothing added to the environment.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Goals" in proc.stdout and "Cold start" in proc.stdout

    result = json.loads(out.read_text(encoding="utf-8"))
    assert set(result) >= {"meta", "turns", "growth", "http", "cold_start", "imports",
                           "lifecycle", "recall", "goals"}
    assert result["meta"]["quick"] is True
    skipped = {name: section["skipped"] for name, section in result.items()
               if isinstance(section, dict) and "skipped" in section}
    assert not skipped, skipped  # every section ran (a child that cannot import is a failure)
    for n in map(str, result["meta"]["sizes"]):
        per_n = result["turns"][n]
        assert per_n["overhead_p50_ms"]["median"] > 0
        assert per_n["bytes_written_per_turn"]["median"] > 0
        assert per_n["rss_peak_mb"]["median"] > 0
    for sample in result["cold_start"]["by_messages"].values():
        assert sample["first_request_s"]["median"] > 0
    one_shot = result["one_shot"]  # hippobot's one-shot; --quick installs no third-party agent
    assert [s["reply_s"] > 0 for s in one_shot["samples"]["hippobot"]] == [True]
    assert one_shot["status"]["llm"].startswith("not run") and one_shot["help"]
    lifecycle = result["lifecycle"]
    assert lifecycle["turns"] == result["meta"]["lifecycle_turns"]
    assert lifecycle["consolidated_after_turns"], "the quick window is small enough to consolidate"
    assert lifecycle["dream_runs"], "Dream ran on schedule"
    assert 0 < lifecycle["cache"]["mean"] <= 1
    assert {g["goal"] for g in result["goals"]} and all(isinstance(g["met"], bool) for g in result["goals"])
    assert out.with_suffix(".txt").read_text(encoding="utf-8").startswith("hippobot benchmarks")
