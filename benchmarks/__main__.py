"""``python -m benchmarks [--quick] [--out FILE] [--keep DIR]``: the whole suite, one table.

Steps (each measurement in a fresh child process; see docs/performance.md):

1. workspaces with N = 50, 500, 5,000 turns are pre-generated on disk
   (:mod:`benchmarks.workload`), then in each round and for each N, 100 real turns run on a
   copy (:mod:`benchmarks.turns`): overhead, bytes, RSS;
2. one pair of runs at N = 500, in-process and over HTTP with the OpenAI SDK;
3. cold starts of ``hippobot agent -m`` and ``-X importtime`` (:mod:`benchmarks.coldstart`),
   and one-shots side by side with ``llm`` and nanobot, each installed once in a cached
   throwaway venv (:mod:`benchmarks.peers`; ``--quick`` skips those installs), plus
   ``hippobot --help``;
4. a lifecycle run from an empty session with Dream every 100 turns: prompt-cache reuse and
   the requests consolidation and Dream add;
5. ``benchmarks/recall_bench.py --small``, when present;
6. a 4,096-token window over 100 turns with planted facts and a correction
   (:mod:`benchmarks.small_window`): consolidations per 100 turns, facts reachable.

The table is printed and everything goes to ``benchmarks/results/bench.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks import ROOT, coldstart, report
from benchmarks.workload import Workload, prepare_home

__all__ = ["FULL", "QUICK", "Plan", "main", "run"]

RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Plan:
    quick: bool
    sizes: tuple[int, ...]  # session length N in turns
    turns_per_run: int  # real turns measured at each N
    repeats: int  # rounds over all N
    context_window: int
    cold_messages: tuple[int, ...]  # session sizes (messages) for cold starts
    cold_runs: int
    one_shot_runs: int  # alternating one-shot runs of hippobot, llm and nanobot
    peers: bool  # install and run llm and nanobot
    lifecycle_turns: int
    dream_every: int
    http_n: int


FULL = Plan(False, (50, 500, 5000), 100, 3, 128_000, (100, 1000, 5000, 10_000), 5, 7, True, 1000, 100, 500)
QUICK = Plan(True, (20, 100), 10, 1, 16_000, (200,), 1, 1, False, 60, 30, 20)


def _child_env() -> dict[str, str]:
    """The environment for a ``python -m benchmarks.X`` child: the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _child(args: list[str], out: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.turns", *args, "--out", str(out)],
                          cwd=ROOT, env=_child_env(), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmarks.turns {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def _turn_run(template: Path, work: Path, n: int, k: int, *, http: bool = False,
              dream_every: int = 0) -> dict[str, Any]:
    home = work / f"run-{n}{'-http' if http else ''}"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(template, home, symlinks=True)
    args = ["--home", str(home), "--start", str(n), "--turns", str(k)]
    if http:
        args.append("--http")
    if dream_every:
        args += ["--dream-every", str(dream_every)]
    try:
        return _child(args, work / "child.json")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def _templates(plan: Plan, work: Path, workload: Workload) -> tuple[dict[int, Path], dict[int, Any]]:
    turns_needed = sorted({*plan.sizes, *(m // 2 for m in plan.cold_messages), 0})
    homes, made = {}, {}
    for n in turns_needed:
        home = work / f"template-{n}"
        made[n] = asdict(prepare_home(home, n, context_window=plan.context_window, workload=workload))
        homes[n] = home
    return homes, made


def _per_n(plan: Plan, homes: dict[int, Path], work: Path) -> tuple[dict, dict]:
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in plan.sizes}
    ratios: dict[str, list[float]] = {}
    for r in range(plan.repeats):
        for n in plan.sizes:
            _log(f"round {r + 1}/{plan.repeats}: {plan.turns_per_run} turns at N={n:,}")
            runs[n].append(report.turn_run_summary(
                _turn_run(homes[n], work, n, plan.turns_per_run)))
        # Ratios inside one round: the machine's mood at that moment cancels out.
        pairs = [*zip(plan.sizes, plan.sizes[1:], strict=False), (plan.sizes[0], plan.sizes[-1])]
        for lo, hi in dict.fromkeys(pairs):
            for metric in ("overhead_p50_ms", "cpu_overhead_p50_ms"):
                ratios.setdefault(f"{metric}:{hi}/{lo}", []).append(
                    runs[hi][-1][metric] / runs[lo][-1][metric])
    summary: dict[str, Any] = {}
    for n, per_run in runs.items():
        s: dict[str, Any] = {key: report.spread(run[key] for run in per_run)
                             for key, value in per_run[0].items()
                             if isinstance(value, (int, float)) and not isinstance(value, bool)}
        s["consolidated_after_turns"] = sorted({t for run in per_run for t in run["consolidated_after_turns"]})
        s["runs"] = per_run
        summary[str(n)] = s
    xs = list(plan.sizes)
    ys = [summary[str(n)]["overhead_p50_ms"]["median"] for n in xs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    growth = {"slope_ms_per_1000_turns": slope * 1000,
              "ratios": {k: report.spread(v) for k, v in ratios.items()}}
    return summary, growth


def _http(plan: Plan, homes: dict[int, Path], work: Path) -> dict[str, Any]:
    n = plan.http_n
    _log(f"HTTP comparison at N={n:,}")
    local = report.turn_run_summary(_turn_run(homes[n], work, n, plan.turns_per_run))
    remote = report.turn_run_summary(_turn_run(homes[n], work, n, plan.turns_per_run, http=True))
    return {"n": n, "overhead_p50_ms": remote["overhead_p50_ms"],
            "overhead_p95_ms": remote["overhead_p95_ms"], "wall_p50_ms": remote["wall_p50_ms"],
            "cpu_overhead_p50_ms": remote["cpu_overhead_p50_ms"],
            "inprocess_overhead_p50_ms": local["overhead_p50_ms"],
            "inprocess_wall_p50_ms": local["wall_p50_ms"],
            "overhead_ratio_http_to_inprocess": remote["overhead_p50_ms"] / local["overhead_p50_ms"]}


def _cold(plan: Plan, homes: dict[int, Path], work: Path) -> tuple[dict, dict]:
    by_messages = {}
    for m in plan.cold_messages:
        _log(f"cold start x{plan.cold_runs} on {m:,} messages")
        samples = coldstart.cold_start(homes[m // 2], work, plan.cold_runs)["samples"]
        by_messages[str(m)] = {k: report.spread(s[k] for s in samples)
                               for k in ("first_request_s", "exit_s", "peak_rss_mb")}
    runs = max(3, plan.cold_runs)
    result = {
        "command": " ".join(Path(c).name for c in coldstart.cli_command()) + " agent -m",
        "by_messages": by_messages,
        "python_s": report.spread(coldstart.process_start("pass", runs)),
        "cli_import_process_s": report.spread(coldstart.process_start("import hippobot.cli.main", runs)),
    }
    _log("-X importtime")
    imports = coldstart.import_times(homes[plan.cold_messages[-1] // 2], work)
    return result, imports


def _one_shot(plan: Plan, homes: dict[int, Path], work: Path) -> dict[str, Any]:
    _log(f"one-shot side by side x{plan.one_shot_runs}" + ("" if plan.peers else " (hippobot only: --quick)"))
    return coldstart.compare_one_shots(homes[plan.cold_messages[0] // 2], work, plan.one_shot_runs,
                                       peers=plan.peers, log=_log)


def _recall(work: Path) -> dict[str, Any]:
    script = ROOT / "benchmarks" / "recall_bench.py"
    if not script.exists():
        return {"skipped": "benchmarks/recall_bench.py is not present"}
    _log("recall_bench.py --small")
    out = work / "recall.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.recall_bench", "--small", "--out", str(out)],
                          cwd=ROOT, env=_child_env(), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if proc.returncode != 0 or not out.exists():
        return {"skipped": f"recall_bench.py --small failed: {proc.stderr.strip()[-300:]}"}
    return json.loads(out.read_text(encoding="utf-8"))


def _small_window(plan: Plan, work: Path) -> dict[str, Any]:
    turns = 40 if plan.quick else 100
    _log(f"small window: {turns} turns in 4,096 tokens (benchmarks.small_window)")
    out = work / "small_window.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.small_window", "--turns", str(turns),
                           "--extra-facts", "12" if plan.quick else "30", "--out", str(out)],
                          cwd=ROOT, env=_child_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=900)
    if proc.returncode != 0 or not out.exists():
        return {"skipped": f"benchmarks.small_window failed: {proc.stderr.strip()[-300:]}"}
    return json.loads(out.read_text(encoding="utf-8"))


def _goals(result: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
    turns = result["turns"]
    worst_p50 = max(s["overhead_p50_ms"]["median"] for s in turns.values())
    lo = plan.sizes[-2] if len(plan.sizes) > 2 else plan.sizes[0]
    ratio = result["growth"]["ratios"][f"overhead_p50_ms:{plan.sizes[-1]}/{lo}"]["median"]
    ampl = max(s["write_amplification"]["median"] for s in turns.values())
    ampl_session = max(s["session_write_amplification"]["median"] for s in turns.values())
    cold_key = "5000" if "5000" in result["cold_start"]["by_messages"] else list(result["cold_start"]["by_messages"])[-1]
    cold = result["cold_start"]["by_messages"][cold_key]
    cache = result["lifecycle"]["cache"]
    largest = str(plan.sizes[-1])
    cold_largest = result["cold_start"]["by_messages"].get(str(2 * plan.sizes[-1]), cold)
    rss = turns[largest]["rss_peak_mb"]["median"]
    cli_rss = cold_largest["peak_rss_mb"]["median"]
    small = result.get("small_window") or {}
    small_goals = [] if "turns" not in small else [
        {"goal": "4k window: <= 25 consolidations per 100 turns, no request over budget",
         "measured": f"{small['consolidations_per_100_turns']}; {small['over_budget_requests']} over",
         "met": small["consolidations_per_100_turns"] <= 25 and small["over_budget_requests"] == 0},
        {"goal": "4k window: every planted fact reachable at the end, the correction current",
         "measured": f"{small['facts_reachable']}/{small['facts_planted']}; {small['correction_current']}",
         "met": small["facts_reachable"] == small["facts_planted"] and small["correction_current"]},
    ]
    return [
        *small_goals, *_one_shot_goals(result.get("one_shot") or {}),
        {"goal": "agent overhead p50 < 5 ms at every N", "measured": f"worst {worst_p50:.2f} ms",
         "met": worst_p50 < 5},
        {"goal": f"no growth with N: p50({int(largest):,})/p50({lo:,}) <= 1.25 (same window)",
         "measured": f"{ratio:.2f}", "met": ratio <= 1.25},
        {"goal": "write amplification < 2x (all files; session file alone)",
         "measured": f"{ampl:.2f}x; {ampl_session:.2f}x", "met": ampl < 2},
        {"goal": f"cold start < 0.5 s on {int(cold_key):,} messages",
         "measured": f"{cold['first_request_s']['median']:.3f} s", "met": cold["first_request_s"]["median"] < 0.5},
        {"goal": "prompt-cache reuse mean >= 0.99, drops only at consolidation/Dream",
         "measured": f"mean {cache['mean']:.4f}, {cache['below_50_outside_lifecycle']} other drops",
         "met": cache["mean"] >= 0.99 and cache["below_50_outside_lifecycle"] == 0},
        {"goal": f"peak RSS < 100 MB at {int(largest):,} turns (long-running; CLI one-shot)",
         "measured": f"{rss:.0f} MB; {cli_rss:.0f} MB", "met": rss < 100 and cli_rss < 100},
    ]


def _one_shot_goals(one: dict[str, Any]) -> list[dict[str, Any]]:
    """hippobot's one-shot against llm's, medians of the same run (none when llm was not run)."""
    ours, base = (one.get("samples") or {}).get("hippobot"), (one.get("samples") or {}).get("llm")
    if not ours or not base:
        return []
    m = {k: (report.spread(s[k] for s in ours)["median"], report.spread(s[k] for s in base)["median"])
         for k in ("reply_s", "exit_s", "peak_rss_mb")}
    return [
        {"goal": "one-shot: time to the reply <= 0.5x llm's", "measured": f"{m['reply_s'][0] / m['reply_s'][1]:.2f}x "
         f"({m['reply_s'][0]:.3f} s vs {m['reply_s'][1]:.3f} s)", "met": m["reply_s"][0] <= 0.5 * m["reply_s"][1]},
        {"goal": "one-shot: time to exit <= 0.6x llm's", "measured": f"{m['exit_s'][0] / m['exit_s'][1]:.2f}x "
         f"({m['exit_s'][0]:.3f} s vs {m['exit_s'][1]:.3f} s)", "met": m["exit_s"][0] <= 0.6 * m["exit_s"][1]},
        {"goal": "one-shot: peak RSS <= llm's", "measured": f"{m['peak_rss_mb'][0]:.0f} MB vs {m['peak_rss_mb'][1]:.0f} MB",
         "met": m["peak_rss_mb"][0] <= m["peak_rss_mb"][1]},
    ]


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run(plan: Plan, work: Path) -> dict[str, Any]:
    workload = Workload()
    started = time.perf_counter()
    meta = {**asdict(plan), "python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg_start": _loadavg(),
            "date": datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": "python -m benchmarks" + (" --quick" if plan.quick else "")}
    _log("pre-generating workspaces")
    homes, made = _templates(plan, work, workload)
    turns, growth = _per_n(plan, homes, work)
    http = _http(plan, homes, work)
    cold, imports = _cold(plan, homes, work)
    one_shot = _one_shot(plan, homes, work)
    _log(f"lifecycle: {plan.lifecycle_turns} turns from empty, Dream every {plan.dream_every}")
    life = _turn_run(homes[0], work, 0, plan.lifecycle_turns, dream_every=plan.dream_every)
    result: dict[str, Any] = {
        "meta": meta, "pregenerated": {str(k): v for k, v in made.items()},
        "turns": turns, "growth": growth, "http": http, "cold_start": cold, "imports": imports,
        "one_shot": one_shot,
        "lifecycle": report.lifecycle_summary(life), "recall": _recall(work),
        "small_window": _small_window(plan, work),
    }
    result["goals"] = _goals(result, plan)
    meta["loadavg_end"] = _loadavg()
    meta["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _finite(value: Any) -> Any:
    """NaN (a percentile of nothing) becomes null, so the file is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (smoke run)")
    parser.add_argument("--out", type=Path, help="JSON results (default: benchmarks/results/bench[-quick].json)")
    parser.add_argument("--keep", type=Path, help="build the workspaces here and keep them")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    out = args.out or RESULTS / ("bench-quick.json" if args.quick else "bench.json")
    work = args.keep or Path(tempfile.mkdtemp(prefix="hippobot-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = run(plan, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = report.render(result)
    sys.stdout.write(text + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_finite(result), indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    out.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(f"\nresults written to {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
