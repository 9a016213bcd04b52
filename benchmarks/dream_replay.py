"""``python -m benchmarks.dream_replay``: Dream alone, on an archive a real run produced.

The memory evaluation (``benchmarks.memory_eval --keep DIR``) leaves each scenario's home in
``DIR/<scenario>``; its ``memory/history.jsonl`` is what consolidation wrote with that model.
This replays only the Dream stage on a fresh copy of that home, as many times and in as many
variants as asked, so Dream's own behaviour can be compared on identical input:

    python -m benchmarks.dream_replay DIR/core --scenario core \\
        --endpoint http://127.0.0.1:8081/v1 --model qwen2.5-coder-1.5b --context-window 8192 \\
        --max-tokens 200 --timeout 900 --edit-phase on --edit-phase off

Per run: status, requests and wall time, findings, what the code placed, the model's edit
calls (made / applied), accounting outcomes, held batches, and for each planted fact of the
scenario whether the files now state it (and a corrected value still stands). JSON with
``--out``. The copy starts from the home as kept (its Dream cursor, memory files and pending
entries: a run whose Dream held its batches leaves them all pending). The home itself is
never changed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.memory_eval import MEMORY_FILES, EvalOptions, _build_env, _stale
from benchmarks.memory_eval_scenarios import SCENARIOS

__all__ = ["main", "replay"]


class _Recording:
    """Wraps the provider: keeps, per request, the task line of the prompt and the answer
    (text and tool calls), so a replay shows what the model actually wrote."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.calls = inner, getattr(inner, "name", "provider"), []

    async def stream(self, request: Any):
        from hippobot.messages import content_text
        from hippobot.providers.base import TextDelta, ToolCallEvent

        prompt = content_text(request.messages[-1].get("content")) if request.messages else ""
        task = next((line for line in prompt.splitlines() if line.startswith("## Task")), "(follow-up)")
        call: dict[str, Any] = {"task": task, "text": "", "tool_calls": []}
        self.calls.append(call)
        async for ev in self.inner.stream(request):
            if isinstance(ev, TextDelta):
                call["text"] += ev.text
            elif isinstance(ev, ToolCallEvent):
                call["tool_calls"].append({"name": ev.name, "arguments": ev.arguments})
            yield ev

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _files(workspace: Path) -> str:
    return "\n".join(
        (workspace / n).read_text(encoding="utf-8", errors="replace") for n in MEMORY_FILES if (workspace / n).exists()
    )


async def replay(home: Path, *, opts: EvalOptions, edit_phase: bool, scenario: str | None) -> dict[str, Any]:
    from hippobot.agent.agent import Agent
    from hippobot.config import load_settings
    from hippobot.config.schema import DreamConfig
    from hippobot.context import tokens
    from hippobot.providers.factory import make_provider
    from hippobot.providers.retry import RetryPolicy
    from hippobot.usage_ledger import UsageLedger

    with tempfile.TemporaryDirectory(prefix="dream-replay-") as tmp:
        copy = Path(tmp) / "home"
        shutil.copytree(home, copy, symlinks=True)
        workspace = copy / "workspace"
        (workspace / ".hippobot" / "usage.jsonl").unlink(missing_ok=True)
        settings = load_settings(_build_env(opts, copy, None), workspace=workspace)
        changes: dict[str, Any] = {"max_tokens": opts.max_tokens, "text_tool_calls": opts.text_tool_calls,
                                   "dream": DreamConfig(edit_phase=edit_phase)}
        if opts.context_window is not None:
            changes["context_window_tokens"] = opts.context_window
        settings = settings.with_defaults(**changes)
        target = settings.model_target()
        ledger = UsageLedger.for_workspace(workspace)
        provider = make_provider(
            target.kind, api_key=target.api_key, api_base=target.api_base, timeout=opts.timeout,
            retry=RetryPolicy(max_attempts=opts.attempts), name=target.provider,
            text_tool_calls=opts.text_tool_calls, usage=ledger,
            estimate=lambda r: tokens.count_messages(r.messages) + tokens.count_tools(r.tools),
        )
        recording = _Recording(provider)
        agent = Agent(settings, provider=recording)
        pending = agent.memory.pending_count()
        started = time.monotonic()
        result = await agent.dream.run()
        wall = time.monotonic() - started
        files = _files(workspace)
        requests = sum(1 for line in (workspace / ".hippobot" / "usage.jsonl").read_text().splitlines() if line.strip()) \
            if (workspace / ".hippobot" / "usage.jsonl").exists() else None
        facts = []
        if scenario is not None:
            for fact in SCENARIOS[scenario].facts:
                facts.append({"id": fact.id, "in_files": fact.found_in(files), "stale": _stale(fact, files)})
        await agent.aclose()
        return {
            "edit_phase": edit_phase, "pending_before": pending, "wall_s": round(wall, 1), "requests": requests,
            "result": result.to_dict(), "held": [h.to_dict() for h in result.held],
            "outcomes": [o.describe() for o in result.outcomes], "facts": facts,
            "model_calls": recording.calls,
            "files": {n: (workspace / n).read_text(encoding="utf-8", errors="replace") for n in MEMORY_FILES},
        }


def _summary(run: dict[str, Any]) -> str:
    r = run["result"]
    facts = ", ".join(f"{f['id']}:{'yes' if f['in_files'] else 'no'}{' (stale)' if f['stale'] else ''}" for f in run["facts"])
    edits = r["edit_calls"]
    lines = [
        f"edit phase {'on' if run['edit_phase'] else 'off'}: {run['pending_before']} pending entries, "
        f"{r['status']}, {run['requests']} request(s), {run['wall_s']}s",
        f"  findings {len(r['findings'])}; code placed {len(r['placed'])}; model edit calls {edits['made']} made, "
        f"{edits['applied']} applied, {edits['text']} text edit(s); invented lines undone "
        f"{len(r.get('ungrounded', []))}; held batches {len(run['held'])}",
        f"  in files: {facts or '-'}",
    ]
    for call in run["model_calls"]:
        text = " / ".join(call["text"].strip().splitlines())[:400]
        calls = "; ".join(f"{c['name']}({c['arguments'][:160]})" for c in call["tool_calls"])
        lines.append(f"  model [{call['task']}]: {text}{(' CALLS ' + calls) if calls else ''}")
    lines += [f"  finding: {f}" for f in r["findings"]]
    lines += [f"  placed: {p}" for p in r["placed"]]
    lines += [f"  outcome: {o}" for o in run["outcomes"]]
    lines += [f"  held: #{h['from']}-#{h['to']}: {h['reason']}" for h in run["held"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dream_replay", description=__doc__.split("\n\n")[0])
    p.add_argument("home", type=Path, help="a scenario home kept by memory_eval --keep (holds workspace/)")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--scenario", choices=sorted(SCENARIOS), help="report this scenario's planted facts")
    p.add_argument("--edit-phase", action="append", choices=("on", "off"), help="variant to run (repeatable; default on)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--attempts", type=int, default=1)
    p.add_argument("--context-window", type=int)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if not (a.home / "workspace" / "memory").is_dir():
        p.error(f"{a.home} holds no workspace/memory: pass a home kept by memory_eval --keep")
    opts = EvalOptions(target="endpoint", endpoint=a.endpoint, model=a.model, timeout=a.timeout,
                       attempts=max(1, a.attempts), context_window=a.context_window, max_tokens=a.max_tokens)
    runs = []
    for variant in a.edit_phase or ["on"]:
        for _ in range(a.repeat):
            run = asyncio.run(replay(a.home, opts=opts, edit_phase=variant == "on", scenario=a.scenario))
            runs.append(run)
            sys.stdout.write(_summary(run) + "\n\n")
            sys.stdout.flush()
            if a.out:
                a.out.write_text(json.dumps(runs, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
