"""Summaries of raw runs, and the text table ``python -m benchmarks`` prints.

Timings over repeated runs are shown as ``median [min–max]`` of the per-run values; a run's
own value is a percentile over its turns. Comparisons that matter (growth with N, HTTP vs
in-process) are ratios taken inside one round, then summarised the same way, so a noisy
machine shifts both sides together.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "cache_summary",
    "lifecycle_summary",
    "percentile",
    "render",
    "spread",
    "turn_run_summary",
    "write_json",
]

_LIFECYCLE_KINDS = ("consolidation", "dream-analysis", "dream-edit")


def write_json(result: dict[str, Any], out: Path) -> None:
    """Save a benchmark's raw result (the numbers behind its printed table) and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"results written to {out}")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def spread(values: Iterable[float | None]) -> dict[str, float]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def turn_run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """One child run of measured turns → its per-run numbers (the first turn apart)."""
    turns = run["turns"]
    steady = turns[1:] or turns
    chat = [t for t in steady if not t["tool"]]
    tool = [t for t in steady if t["tool"]]
    written = [(t["written"] or 0) + (t["background_written"] or 0) for t in turns]
    grew = sum(t["grew"] for t in turns)
    session_written = sum(t["session_written"] for t in turns)
    session_grew = sum(t["session_grew"] for t in turns)
    return {
        "overhead_p50_ms": percentile([t["overhead_ms"] for t in steady], 50),
        "overhead_p95_ms": percentile([t["overhead_ms"] for t in steady], 95),
        "chat_overhead_p50_ms": percentile([t["overhead_ms"] for t in chat], 50),
        "tool_overhead_p50_ms": percentile([t["overhead_ms"] for t in tool], 50),
        "cpu_overhead_p50_ms": percentile([t["cpu_overhead_ms"] for t in steady], 50),
        "gc_ms_per_turn": statistics.fmean([t["gc_ms"] for t in steady]),
        "replayed_messages": statistics.median([t["replayed"] for t in steady]),
        "wall_p50_ms": percentile([t["wall_ms"] for t in steady], 50),
        "model_p50_ms": percentile([t["model_ms"] for t in steady], 50),
        "first_turn_overhead_ms": turns[0]["overhead_ms"],
        "background_ms_total": sum(t["background_ms"] for t in turns),
        "bytes_written_per_turn": statistics.median(written),
        "chat_bytes_written_per_turn": statistics.median(
            [(t["written"] or 0) for t in turns if not t["tool"]] or [0]),
        "tool_bytes_written_per_turn": statistics.median(
            [(t["written"] or 0) for t in turns if t["tool"]] or [0]),
        "write_amplification": _ratio(sum(written), grew),
        "session_write_amplification": _ratio(session_written, session_grew),
        "consolidated_after_turns": [t["turn"] for t in turns if t["consolidations"]],
        "rss_peak_mb": run["rss_peak_mb"],
        "rss_after_first_turn_mb": run.get("rss_after_first_turn_mb") or math.nan,
        "rss_start_mb": run["rss_start_mb"],
        "session_messages": run["session_messages"],
    }


def cache_summary(requests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Prompt-cache prefix reuse between consecutive requests of one process."""
    pairs = [(requests[i - 1], r) for i, r in enumerate(requests) if r["reuse"] is not None]
    reuse = [r["reuse"] for _, r in pairs]
    drops = []
    for prev, r in pairs:
        if r["reuse"] < 0.5:
            explained = r["kind"] in _LIFECYCLE_KINDS or prev["kind"] in _LIFECYCLE_KINDS
            drops.append({"turn": r["turn"], "from": prev["kind"], "to": r["kind"],
                          "reuse": round(r["reuse"], 4), "reuse_recent": round(r["reuse_recent"], 4),
                          "at_lifecycle": explained})
    turn_pairs = [(prev, r) for prev, r in pairs
                  if r["kind"].startswith("turn") and prev["kind"].startswith("turn")]
    steady = [r["reuse"] for _, r in turn_pairs]
    return {
        "requests": len(requests),
        "mean": statistics.fmean(reuse) if reuse else math.nan,
        "mean_recent": statistics.fmean(r["reuse_recent"] for _, r in pairs) if pairs else math.nan,
        "below_50_recent": sum(1 for _, r in pairs if r["reuse_recent"] < 0.5),
        "min": min(reuse) if reuse else math.nan,
        "below_50": len(drops),
        "below_50_outside_lifecycle": sum(1 for d in drops if not d["at_lifecycle"]),
        "turn_to_turn_mean": statistics.fmean(steady) if steady else math.nan,
        "turn_to_turn_min": min(steady) if steady else math.nan,
        "turn_to_turn_extending": sum(1 for _, r in turn_pairs if r["extends_previous"]),
        "turn_to_turn_pairs": len(turn_pairs),
        "drops": drops[:40],
    }


def lifecycle_summary(run: dict[str, Any]) -> dict[str, Any]:
    """Extra model requests and prompt tokens that consolidation and Dream add per 100 turns."""
    turns = len(run["turns"])
    per100 = 100 / turns if turns else math.nan
    by_kind: dict[str, dict[str, float]] = {}
    for r in run["requests"]:
        k = by_kind.setdefault(r["kind"], {"requests": 0, "prompt_tokens": 0})
        k["requests"] += 1
        k["prompt_tokens"] += r["prompt_tokens"]
    turn_tokens = sum(v["prompt_tokens"] for k, v in by_kind.items() if k.startswith("turn"))

    def group(kinds: tuple[str, ...]) -> dict[str, float]:
        req = sum(by_kind.get(k, {}).get("requests", 0) for k in kinds)
        tok = sum(by_kind.get(k, {}).get("prompt_tokens", 0) for k in kinds)
        return {"requests_per_100_turns": req * per100,
                "prompt_tokens_per_100_turns": tok * per100,
                "share_of_turn_prompt_tokens": tok / turn_tokens if turn_tokens else math.nan}

    return {
        "turns": turns,
        "by_kind": by_kind,
        "turn_prompt_tokens_per_100_turns": turn_tokens * per100,
        "consolidation": group(("consolidation",)),
        "dream": group(("dream-analysis", "dream-edit")),
        "consolidated_after_turns": [t["turn"] for t in run["turns"] if t["consolidations"]],
        "consolidation_bytes_written": sum(t["background_written"] or 0 for t in run["turns"]),
        "consolidation_wall_ms": [round(t["background_ms"], 1) for t in run["turns"] if t["consolidations"]],
        "dream_runs": [{k: d[k] for k in ("after_turn", "status", "entries", "requests",
                                           "prompt_tokens", "wall_ms", "overhead_ms",
                                           "written", "grew")} for d in run["dreams"]],
        "background_overhead_ms_total": sum(t["background_overhead_ms"] for t in run["turns"]),
        "cache": cache_summary(run["requests"]),
    }


# --- text ------------------------------------------------------------------------------


def fmt(s: dict[str, float], digits: int = 1, unit: str = "") -> str:
    """``median [min–max]`` (just the median when there was one run)."""
    if any(math.isnan(s[k]) for k in ("median", "min", "max")):
        return "n/a"
    med = f"{s['median']:.{digits}f}{unit}"
    if s["min"] == s["max"]:
        return med
    return f"{med} [{s['min']:.{digits}f}–{s['max']:.{digits}f}]"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _kb(value: float) -> str:
    return f"{value / 1024:.1f} KiB" if value >= 1024 else f"{value:.0f} B"


def render(result: dict[str, Any]) -> str:
    meta = result["meta"]
    out = [
        f"hippobot benchmarks ({'quick' if meta['quick'] else 'full'}): scripted model, "
        f"context window {meta['context_window']:,} tokens, {meta['repeats']} round(s); "
        "timings are median [min–max] over rounds",
        "",
        f"Per turn, against session length ({meta['turns_per_run']} real turns after N "
        "pre-generated; 1 in 10 turns calls memory_search)",
    ]
    rows = []
    for n, s in result["turns"].items():
        rows.append([
            f"{int(n):,}", f"{s['replayed_messages']['median']:.0f}",
            fmt(s["overhead_p50_ms"], 2), fmt(s["overhead_p95_ms"], 2),
            fmt(s["chat_overhead_p50_ms"], 2), fmt(s["cpu_overhead_p50_ms"], 2),
            fmt(s["tool_overhead_p50_ms"], 1),
            fmt(s["gc_ms_per_turn"], 2), fmt(s["first_turn_overhead_ms"], 0),
            _kb(s["chat_bytes_written_per_turn"]["median"]),
            _kb(s["tool_bytes_written_per_turn"]["median"]),
            fmt(s["session_write_amplification"], 2, "x"), fmt(s["write_amplification"], 2, "x"),
            fmt(s["rss_peak_mb"], 0),
        ])
    out.append(table(["N turns", "replayed msgs", "overhead p50 ms", "p95 ms", "chat-only p50",
                      "CPU p50 ms", "tool turn p50", "GC ms/turn", "1st turn ms",
                      "written/chat turn", "written/tool turn", "ampl. session",
                      "ampl. all files", "peak RSS MB"], rows))
    g = result["growth"]
    ratios = "; ".join(
        f"{key.split(':')[1]} {fmt(v, 2)} ({'CPU' if key.startswith('cpu') else 'wall'})"
        for key, v in g["ratios"].items())
    out.append(f"growth: p50 overhead slope {g['slope_ms_per_1000_turns']:+.3f} ms per 1,000 "
               f"turns; ratios of p50 in the same round: {ratios}")
    h = result.get("http")
    if h:
        out.append(
            f"over HTTP (OpenAI SDK -> ScriptedServer, N={h['n']:,}): overhead p50 "
            f"{h['overhead_p50_ms']:.2f} ms, p95 {h['overhead_p95_ms']:.2f} ms, turn wall p50 "
            f"{h['wall_p50_ms']:.2f} ms; in-process in the same round: overhead p50 "
            f"{h['inprocess_overhead_p50_ms']:.2f} ms, wall p50 {h['inprocess_wall_p50_ms']:.2f} ms"
        )
    out += ["", _render_cold(result)]
    if result.get("one_shot"):
        from benchmarks.coldstart import one_shot_table

        o = result["one_shot"]
        out += ["", f"One shot side by side: median [min-max] of {o['runs']} run(s) each, alternating, "
                "same scripted model on 127.0.0.1; reply = the whole reply on stdout, from spawn",
                one_shot_table(o)]
    out += ["", _render_lifecycle(result)]
    rec = result.get("recall")
    if rec and "query" in rec:
        out += ["", "Memory search (benchmarks/recall_bench.py --small): "
                f"query p50 {rec['query']['median_ms']} ms, p95 {rec['query']['p95_ms']} ms; "
                f"append turn + sync p50 {rec['append_turn_sync']['median_ms']} ms "
                f"({rec['workspace']['history_entries']:,} history entries, "
                f"{rec['workspace']['session_messages']:,} messages)"]
    elif rec:
        out += ["", f"Memory search: {rec.get('skipped', 'not measured')}"]
    small = result.get("small_window")
    if small and "turns" in small:
        from benchmarks.small_window import describe

        out += ["", "Small window (benchmarks.small_window): " + describe(small)]
    elif small:
        out += ["", f"Small window: {small.get('skipped', 'not measured')}"]
    out += ["", "Goals"]
    out.append(table(["goal", "measured", "met"],
                     [[g["goal"], g["measured"], "yes" if g["met"] else "NO"] for g in result["goals"]]))
    return "\n".join(out)


def _render_cold(result: dict[str, Any]) -> str:
    c = result["cold_start"]
    rows = [[f"{int(n):,}", fmt(s["first_request_s"], 3), fmt(s["exit_s"], 3), fmt(s["peak_rss_mb"], 0)]
            for n, s in c["by_messages"].items()]
    imp = result["imports"]
    top = ", ".join(f"{k} {v:.2f}" for k, v in list(imp["agent_run_top"].items())[:6])
    return "\n".join([
        f"Cold start: `{c['command']}` until the first model request (fresh process, incl. "
        "interpreter start)",
        table(["session messages", "first request s", "process exit s", "peak RSS MB"], rows),
        f"baselines: `python -c pass` {fmt(c['python_s'], 3)} s; `import hippobot.cli.main` "
        f"process {fmt(c['cli_import_process_s'], 3)} s",
        f"-X importtime: import hippobot.cli.main {imp['cli_import_s']:.3f} s; imports during "
        f"`agent -m` {imp['agent_run_import_s']:.3f} s, by package (s): {top}",
    ])


def _render_lifecycle(result: dict[str, Any]) -> str:
    lc = result["lifecycle"]
    cache = lc["cache"]
    c, d = lc["consolidation"], lc["dream"]
    drops = ", ".join(f"turn {x['turn']} {x['from']}->{x['to']} {x['reuse']:.2f}" for x in cache["drops"][:6])
    return "\n".join([
        f"Lifecycle: {lc['turns']} real turns from an empty session, Dream every "
        f"{result['meta']['dream_every']} turns; consolidated after turns "
        f"{', '.join(map(str, lc['consolidated_after_turns'])) or '-'}",
        f"prompt-cache prefix reuse over {cache['requests']} requests: mean {cache['mean']:.4f}, "
        f"min {cache['min']:.4f}, {cache['below_50']} below 50% "
        f"({cache['below_50_outside_lifecycle']} not at consolidation/Dream); against the best "
        f"of the last 8 requests (a cache holding several prefixes): mean "
        f"{cache['mean_recent']:.4f}, {cache['below_50_recent']} below 50%; turn to turn: mean "
        f"{cache['turn_to_turn_mean']:.4f}, min {cache['turn_to_turn_min']:.4f}, "
        f"{cache['turn_to_turn_extending']}/{cache['turn_to_turn_pairs']} requests extend the "
        "previous one byte for byte",
        f"drops: {drops or '-'}",
        f"per 100 turns: consolidation {c['requests_per_100_turns']:.2f} requests, "
        f"{c['prompt_tokens_per_100_turns']:,.0f} prompt tokens "
        f"({c['share_of_turn_prompt_tokens']:.1%} of the turns' own); Dream "
        f"{d['requests_per_100_turns']:.2f} requests, {d['prompt_tokens_per_100_turns']:,.0f} "
        f"prompt tokens ({d['share_of_turn_prompt_tokens']:.1%}); turns "
        f"{lc['turn_prompt_tokens_per_100_turns']:,.0f} prompt tokens",
        f"consolidation runs (background, wall ms incl. model): "
        f"{', '.join(map(str, lc['consolidation_wall_ms'])) or '-'}; Dream runs: "
        + (", ".join(f"{d['status']} {d['entries']} entries {d['wall_ms']:.0f} ms "
                     f"{_kb(d['written'] or 0)} written" for d in lc["dream_runs"] if d["entries"])
           or "-"),
    ])
