"""``python -m benchmarks.memory_eval``: does what a user tells hippobot survive into a fresh session?

For each scenario (:mod:`benchmarks.memory_eval_scenarios`) a new workspace is made and the
sessions are played on simulated days, each ending with ``/new`` (the archive is written);
then Dream runs once, and every fact's question is asked in a fresh session. Per fact and stage
it reports: archived (in ``memory/history.jsonl``), in the memory files (SOUL/USER/MEMORY.md, and
whether a corrected value survived there), visible in the fresh session's prompt, answered.
Per stage (turns, consolidation, Dream, questions): model requests, prompt / cached / uncached /
completion tokens (from the usage ledger, i.e. what the endpoint reported) and wall time.

Targets:

* default: the scripted model over HTTP, answering like a perfect archivist (the pipeline's own
  losses; seconds);
* ``--endpoint URL --model NAME``: any OpenAI-compatible server, e.g. a local llama.cpp;
* ``--settings``: the endpoint of the usual settings (``HIPPOBOT_*`` env, ``config.json``),
  e.g. your Ollama, OpenAI or Anthropic account. The scenarios run in temporary workspaces;
  your own workspace is never touched.

A failing case (endpoint down, too slow, malformed answer) is recorded with its error and the
run goes on. Exit status: 0 when every case ran, 1 when some failed, 2 for bad arguments.
Results: a table on stdout and JSON in ``--out`` (default
``benchmarks/results/memory_eval-<target>.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import ROOT
from benchmarks.memory_eval_scenarios import SCENARIOS, Fact, Scenario
from hippobot.messages import content_text, user_words
from hippobot.testing.scripted import RecordedRequest, ScriptedModel
from hippobot.usage_ledger import UsageTotals

__all__ = ["EvalOptions", "archive_lines", "archived_facts", "main", "oracle", "run_eval", "superseded_by_correction"]

RESULTS = ROOT / "benchmarks" / "results"
STAGES = ("turns", "consolidation", "dream", "questions")
_JOB_STAGE = {"turn": "turns", "consolidation": "consolidation", "dream": "dream", "questions": "questions"}
MEMORY_FILES = ("SOUL.md", "USER.md", "memory/MEMORY.md")


@dataclass(slots=True)
class EvalOptions:
    target: str = "scripted"  # scripted | endpoint | settings
    endpoint: str | None = None
    model: str | None = None
    api_key: str | None = None
    provider: str | None = None
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    timeout: float = 120.0
    attempts: int = 2
    context_window: int | None = None
    max_tokens: int = 1024
    text_tool_calls: str = "auto"
    keep: Path | None = None
    budget_s: float | None = None  # stop starting cases after this long (slow endpoints)


@dataclass(slots=True)
class StageStats(UsageTotals):
    """One stage's requests and tokens (from the usage ledger) and its wall time."""

    wall_s: float = 0.0

    def reset_counts(self) -> None:
        for counter in fields(UsageTotals):
            setattr(self, counter.name, counter.default)

    def to_dict(self) -> dict[str, Any]:
        data = UsageTotals.to_dict(self)
        data["failed_requests"] = data.pop("failed")
        return {**data, "wall_s": round(self.wall_s, 2)}


@dataclass(slots=True)
class FactResult:
    id: str
    kind: str
    archived: bool = False
    in_files: bool = False
    stale_in_files: bool = False
    visible_in_prompt: bool = False
    answered: bool = False
    answer: str = ""


@dataclass(slots=True)
class ScenarioResult:
    name: str
    facts: list[FactResult] = field(default_factory=list)
    stages: dict[str, StageStats] = field(default_factory=lambda: {s: StageStats() for s in STAGES})
    failures: list[dict[str, str]] = field(default_factory=list)
    dream: str = ""
    dream_details: dict[str, Any] = field(default_factory=dict)  # DreamResult.to_dict()
    raw_tool_text_replies: int = 0
    tool_calls_in_questions: int = 0
    wall_s: float = 0.0
    deadline: float | None = None
    checkpoint: Callable[[], None] | None = None  # called after every case (partial results)

    def accuracy(self) -> float:
        return sum(f.answered for f in self.facts) / len(self.facts) if self.facts else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "accuracy": round(self.accuracy(), 3),
            "answered": sum(f.answered for f in self.facts),
            "facts_total": len(self.facts),
            "facts": [asdict(f) for f in self.facts],
            "stages": {k: v.to_dict() for k, v in self.stages.items()},
            "failures": self.failures,
            "dream": self.dream,
            "dream_details": self.dream_details,
            "raw_tool_text_replies": self.raw_tool_text_replies,
            "tool_calls_in_questions": self.tool_calls_in_questions,
            "wall_s": round(self.wall_s, 1),
        }


# --- the scripted model: a perfect archivist, Dream analyst and answerer --------------------


def _user_text(content: Any) -> str:
    return user_words(content_text(content))


_NEGATED = re.compile(r"\b(?:not (?:in |at |on )?|from )([A-Za-z][\w-]+)(?= to\b|[ .,]|$)", re.I)


def oracle(scenario: Scenario) -> Callable[[RecordedRequest], str]:
    """A fallback for :class:`ScriptedModel` that does each job the way a careful model would,
    so the scripted run measures only what hippobot itself loses between the stages."""
    questions = {f.question: f for f in scenario.facts}

    def answer(request: RecordedRequest) -> str:
        last = _user_text(request.messages[-1].get("content")) if request.messages else ""
        first_user = next((m for m in request.messages if m.get("role") == "user"), None)
        first = content_text(first_user.get("content")) if first_user else ""
        if last.startswith("[Memory archive request") or last.startswith("You archive part of a conversation"):
            return _archive(request, last)
        if "## Task: analysis" in first and len(request.messages) <= 2:
            return _analyse(first)
        if "## Task: apply the findings" in first:
            return "Done."  # no tool call: Dream's text path applies the findings
        fact = questions.get(last)
        if fact is not None:
            system = content_text(request.messages[0].get("content"))
            for line in system.splitlines():
                if fact.found_in(line):
                    return f"From memory: {line.strip('- ').strip()}"
            return "I don't know."
        return "Noted."

    return answer


def _archive(request: RecordedRequest, last: str) -> str:
    if last.startswith("[Memory archive request"):
        m = re.search(r"Archive the first (\d+) messages", last)
        count = int(m.group(1)) if m else len(request.messages) - 2
        said = [_user_text(x.get("content")) for x in request.messages[1:-1][:count] if x.get("role") == "user"]
    else:
        body = last.split("<transcript", 1)[-1].split("</transcript>", 1)[0]
        said = [line.split("] USER: ", 1)[1] for line in body.splitlines() if "] USER: " in line]
    return archive_lines(said)


def archive_lines(said: list[str]) -> str:
    """What a perfect archivist keeps of the user's messages: every statement, as a fact."""
    lines = [f"- [permanent] User said: {s}" for s in said if s and not s.endswith("?") and not s.startswith("/")]
    return "\n".join(lines) or "(nothing)"


def archived_facts(text: str) -> list[str]:
    """The facts the scripted archivist wrote (``- [permanent] User said: ...``) in ``text``,
    and those hippobot kept itself from a "remember that…" the model did not write down (the
    user's words, then "(the user's own words, asked to be remembered: …)")."""
    said = re.findall(r"- \[permanent\] User said: ([^\n]+)", text)
    kept = re.findall(r"- \[permanent\] ([^\n]+)\n\s*\(the user's own words, asked to be remembered", text)
    return said + kept


def superseded_by_correction(facts: list[str]) -> list[bool]:
    """Per fact, whether another one corrects it ("... not in Tokyo" replaces "... in Tokyo")."""
    negated = {w.lower() for f in facts for w in _NEGATED.findall(f)}
    return [any(w in f.lower() for w in negated) and not _NEGATED.search(f) for f in facts]


def _analyse(prompt: str) -> str:
    history = prompt.split("## Conversation history", 1)[-1]
    facts = archived_facts(history)
    negated = {w.lower() for f in facts for w in _NEGATED.findall(f)}
    files = prompt.split("## Current memory files", 1)[-1].split("## Conversation history", 1)[0]
    out = []
    for fact, superseded in zip(facts, superseded_by_correction(facts), strict=True):
        if not superseded:
            out.append(f"[USER] {fact}")
        else:  # declined with a reason, so Dream's accounting can close the batch
            out.append(f'[SKIP] "User said: {fact}" — superseded by a later correction')
    for line in files.splitlines():
        text = line.strip().lstrip("- ").strip()
        if text and any(w in text.lower() for w in negated) and not _NEGATED.search(text):
            out.append(f'[FILE-REMOVE] USER.md: "{text}" — superseded by a correction')
    return "\n".join(out) or "[SKIP] nothing new"


# --- running one scenario -------------------------------------------------------------------


class SimClock:
    """The agent's clock, moved to the simulated day of each session."""

    def __init__(self) -> None:
        self.base = datetime.now().astimezone().replace(hour=10, minute=0, second=0, microsecond=0)
        self.days_ago = 0
        self.minutes = 0

    def __call__(self) -> datetime:
        self.minutes += 1
        return self.base - timedelta(days=self.days_ago) + timedelta(minutes=self.minutes)


def _build_env(opts: EvalOptions, home: Path, server_url: str | None) -> dict[str, str]:
    if opts.target == "settings":
        env = dict(os.environ)
        env.pop("HIPPOBOT_WORKSPACE", None)
        return env
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
    env["HIPPOBOT_HOME"] = str(home)
    env["HIPPOBOT_API_BASE"] = server_url or opts.endpoint or ""
    env["HIPPOBOT_MODEL"] = opts.model or "scripted-model"
    env["HIPPOBOT_API_KEY"] = opts.api_key or "sk-eval-not-needed"
    if opts.provider:
        env["HIPPOBOT_PROVIDER"] = opts.provider
    return env


@contextmanager
def _timed(stats: StageStats) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        stats.wall_s += time.monotonic() - started


async def _case(result: ScenarioResult, stage: str, case: str, work: Any) -> Any:
    """Await ``work``; a failure is recorded for this case and the run goes on."""
    if result.deadline is not None and time.monotonic() > result.deadline:
        work.close()
        result.failures.append({"stage": stage, "case": case, "error": "not reached: --budget-s spent"})
        return None
    try:
        return await work
    except Exception as exc:  # any failure of one case must not end the evaluation
        result.failures.append({"stage": stage, "case": case, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return None
    finally:
        if result.checkpoint is not None:
            result.checkpoint()


def _tally(result: ScenarioResult, ledger: Any) -> None:
    """Request and token counts per stage from the workspace's usage ledger."""
    for stats in result.stages.values():
        stats.reset_counts()  # recounted from the whole ledger each time
    for rec in ledger.read():
        result.stages[_JOB_STAGE.get(rec.job, "turns")].add(rec)


def _files_text(workspace: Path) -> str:
    parts = []
    for name in MEMORY_FILES:
        try:
            parts.append((workspace / name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    return "\n".join(parts)


def _stale(fact: Fact, text: str) -> bool:
    """A line still stating the replaced value without the new one."""
    return any(
        any(s in line.lower() for s in fact.stale) and not fact.found_in(line) for line in text.splitlines()
    )


async def run_scenario(
    scenario: Scenario,
    opts: EvalOptions,
    root: Path,
    server_url: str | None,
    progress: Callable[[ScenarioResult], None] | None = None,
) -> ScenarioResult:
    from hippobot.agent.agent import Agent
    from hippobot.agent.api import Api
    from hippobot.cli.onboard import onboard
    from hippobot.config import load_settings
    from hippobot.context import tokens
    from hippobot.providers.factory import make_provider
    from hippobot.providers.metering import usage_job
    from hippobot.providers.retry import RetryPolicy
    from hippobot.providers.text_tools import recover_tool_calls
    from hippobot.usage_ledger import UsageLedger

    result = ScenarioResult(scenario.name)
    started = time.monotonic()
    if opts.budget_s is not None:
        result.deadline = started + opts.budget_s
    home = root / scenario.name
    workspace = home / "workspace"
    settings = load_settings(_build_env(opts, home, server_url), workspace=workspace)
    changes: dict[str, Any] = {"max_tokens": opts.max_tokens, "text_tool_calls": opts.text_tool_calls}
    if opts.context_window is not None:
        changes["context_window_tokens"] = opts.context_window
    settings = settings.with_defaults(**changes)
    onboard(settings)
    target = settings.model_target()
    ledger = UsageLedger.for_workspace(workspace)
    provider = make_provider(
        target.kind, api_key=target.api_key, api_base=target.api_base, extra_headers=target.extra_headers,
        timeout=opts.timeout, retry=RetryPolicy(max_attempts=opts.attempts), name=target.provider,
        text_tool_calls=opts.text_tool_calls, usage=ledger,
        estimate=lambda r: tokens.count_messages(r.messages) + tokens.count_tools(r.tools),
    )
    clock = SimClock()
    agent = Agent(settings, provider=provider, now=clock)
    stages = result.stages

    def checkpoint() -> None:
        _tally(result, ledger)
        result.wall_s = time.monotonic() - started
        if progress is not None:
            progress(result)

    result.checkpoint = checkpoint
    try:
        for n, session in enumerate(scenario.sessions, 1):
            clock.days_ago = session.days_ago
            key = f"cli:session-{n}"
            for i, text in enumerate(session.messages, 1):
                with _timed(stages["turns"]):
                    await _case(result, "turns", f"session {n} message {i}", agent.turn(key, text))
            with _timed(stages["consolidation"]):
                await _case(result, "consolidation", f"session {n} /new", Api.for_agent(agent).handle(key, "/new"))
                await agent.jobs.drain(None)
        history = "\n".join(e.content for e in agent.memory.read_history(after=0))
        clock.days_ago = 0
        with _timed(stages["dream"]):
            dream = await _case(result, "dream", "dream", agent.dream.run())
        result.dream = dream.describe() if dream is not None else "failed (see failures)"
        if dream is not None:
            result.dream_details = {**dream.to_dict(), "held": [h.to_dict() for h in dream.held]}
        files = _files_text(workspace)
        names = [t["function"]["name"] for t in agent.tools_for("cli:probe").schemas()]
        for fact in scenario.facts:
            fr = FactResult(fact.id, fact.kind, archived=fact.found_in(history), in_files=fact.found_in(files))
            fr.stale_in_files = _stale(fact, files)
            key = f"cli:question-{fact.id}"
            system = agent.prompts.system_prompt(agent.sessions.get(key), names)
            fr.visible_in_prompt = fact.found_in(system.text)
            with _timed(stages["questions"]), usage_job("questions"):
                turn = await _case(result, "questions", fact.id, agent.turn(key, fact.question))
            if turn is not None:
                fr.answer = turn.reply[:300]
                fr.answered = fact.found_in(turn.reply) and not _stale(fact, turn.reply)
                if turn.run is not None:
                    result.tool_calls_in_questions += turn.run.tool_calls
                if recover_tool_calls(turn.reply, names) is not None or '"arguments"' in turn.reply:
                    result.raw_tool_text_replies += 1
            result.facts.append(fr)
    finally:
        await agent.aclose(timeout=60)
    result.checkpoint = None
    _tally(result, ledger)
    result.wall_s = time.monotonic() - started
    return result


async def play_scenarios(
    names: Sequence[str],
    keep: Path | None,
    prefix: str,
    play: Callable[[Scenario, Path, Callable[[ScenarioResult], None]], Awaitable[ScenarioResult]],
    progress: Callable[[list[ScenarioResult]], None] | None = None,
) -> list[ScenarioResult]:
    """``play`` each named scenario under one root (``keep``, else a temporary folder removed
    afterwards); ``progress`` sees the results so far after every case. Shared by the hippobot
    and the nanobot evaluation."""
    root = Path(tempfile.mkdtemp(prefix=prefix)) if keep is None else keep
    root.mkdir(parents=True, exist_ok=True)
    results: list[ScenarioResult] = []

    def partial(current: ScenarioResult) -> None:
        if progress is not None:
            progress([*results, current])

    try:
        for name in names:
            results.append(await play(SCENARIOS[name], root, partial))
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return results


def results_writer(out: Path, meta: dict[str, Any]) -> Callable[..., None]:
    """``write(results, done=...)``: the JSON results file, replaced whole on every call, with
    ``meta`` plus whether the run is complete, when it started and how long it has taken."""
    started, started_at = time.monotonic(), datetime.now().astimezone().isoformat(timespec="seconds")
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(results: list[ScenarioResult], *, done: bool) -> None:
        data = {
            "meta": {**meta, "complete": done, "started": started_at,
                     "wall_s": round(time.monotonic() - started, 1)},
            "scenarios": [r.to_dict() for r in results],
        }
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(out)

    return write


async def run_eval(
    opts: EvalOptions, progress: Callable[[list[ScenarioResult]], None] | None = None
) -> list[ScenarioResult]:
    async def play(
        scenario: Scenario, root: Path, partial: Callable[[ScenarioResult], None]
    ) -> ScenarioResult:
        if opts.target != "scripted":
            return await run_scenario(scenario, opts, root, None, partial)
        from hippobot.testing.server import ScriptedServer

        model = ScriptedModel()
        model.fallback = oracle(scenario)
        with ScriptedServer(model) as server:
            return await run_scenario(scenario, opts, root, server.base_url, partial)

    return await play_scenarios(opts.scenarios, opts.keep, "hippobot-eval-", play, progress)


# --- output ---------------------------------------------------------------------------------


def _yn(value: bool) -> str:
    return "yes" if value else "no"


def format_table(results: list[ScenarioResult], label: str) -> str:
    lines = [f"memory evaluation — {label}"]
    for r in results:
        lines.append("")
        lines.append(f"scenario {r.name}: {sum(f.answered for f in r.facts)}/{len(r.facts)} answered, {r.wall_s:.0f}s")
        lines.append(f"  {'fact':<8} {'kind':<14} {'archived':>8} {'in files':>8} {'stale':>6} {'prompt':>7} {'answered':>8}")
        for f in r.facts:
            lines.append(
                f"  {f.id:<8} {f.kind:<14} {_yn(f.archived):>8} {_yn(f.in_files):>8} "
                f"{_yn(f.stale_in_files):>6} {_yn(f.visible_in_prompt):>7} {_yn(f.answered):>8}"
            )
        lines.append(f"  {'stage':<14} {'requests':>8} {'failed':>6} {'prompt':>8} {'cached':>8} {'uncached':>8} {'compl.':>7} {'wall s':>7}")
        for name, s in r.stages.items():
            lines.append(
                f"  {name:<14} {s.requests:>8} {s.failed:>6} {s.prompt_tokens:>8} {s.cached_tokens:>8} "
                f"{s.uncached_tokens:>8} {s.completion_tokens:>7} {s.wall_s:>7.1f}"
            )
        lines.append(f"  dream: {r.dream.splitlines()[0] if r.dream else '-'}")
        if r.dream_details:
            d, edits = r.dream_details, r.dream_details.get("edit_calls", {})
            lines.append(
                f"  dream did: {len(d.get('findings', []))} finding(s), code placed {len(d.get('placed', []))}, "
                f"model edit calls {edits.get('made', 0)} made / {edits.get('applied', 0)} applied, "
                f"{len(d.get('ungrounded', []))} invented line(s) undone, {len(d.get('held', []))} batch(es) held"
            )
        lines.append(
            f"  tool calls in question turns: {r.tool_calls_in_questions}; replies showing a raw tool call: "
            f"{r.raw_tool_text_replies}"
        )
        for fail in r.failures:
            lines.append(f"  FAILED {fail['stage']} / {fail['case']}: {fail['error']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> tuple[EvalOptions, Path | None]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory_eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8081/v1")
    p.add_argument("--model", help="model name at the endpoint (with --endpoint)")
    p.add_argument("--api-key", help="API key for --endpoint (local servers need none)")
    p.add_argument("--provider", help="provider name for --endpoint (default: openai-compatible)")
    p.add_argument("--settings", action="store_true", help="use the endpoint of the usual settings (HIPPOBOT_* env, config.json)")
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="run only this scenario (repeatable)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a model request may take (default 120)")
    p.add_argument("--attempts", type=int, default=2, help="attempts per model request (default 2)")
    p.add_argument("--context-window", type=int, help="contextWindowTokens for the run (e.g. 8192 for a local model)")
    p.add_argument("--max-tokens", type=int, default=1024, help="tokens reserved per reply (default 1024)")
    p.add_argument("--text-tool-calls", choices=("auto", "on", "off"), default="auto", help="agents.defaults.textToolCalls for the run")
    p.add_argument("--out", type=Path, help="JSON results file (default benchmarks/results/memory_eval-<target>.json)")
    p.add_argument("--keep", type=Path, help="keep the scenario workspaces in this directory")
    p.add_argument("--budget-s", type=float, help="stop starting new cases after this many seconds (partial results)")
    a = p.parse_args(argv)
    if a.endpoint and a.settings:
        p.error("--endpoint and --settings exclude each other")
    if a.endpoint and not a.model:
        p.error("--endpoint needs --model NAME")
    target = "endpoint" if a.endpoint else "settings" if a.settings else "scripted"
    opts = EvalOptions(
        target=target, endpoint=a.endpoint, model=a.model, api_key=a.api_key, provider=a.provider,
        scenarios=tuple(a.scenario or SCENARIOS), timeout=a.timeout, attempts=max(1, a.attempts),
        context_window=a.context_window, max_tokens=a.max_tokens, text_tool_calls=a.text_tool_calls, keep=a.keep,
        budget_s=a.budget_s,
    )
    return opts, a.out


def main(argv: list[str] | None = None) -> int:
    opts, out_arg = parse_args(argv)
    out = out_arg or RESULTS / f"memory_eval-{opts.target}.json"
    label = {
        "scripted": "scripted model (a perfect archivist over HTTP)",
        "endpoint": f"{opts.model} at {opts.endpoint}",
        "settings": "the endpoint of the usual settings",
    }[opts.target] + f", textToolCalls={opts.text_tool_calls}"
    write = results_writer(out, {
        "target": opts.target, "endpoint": opts.endpoint, "model": opts.model, "label": label,
        "text_tool_calls": opts.text_tool_calls, "context_window": opts.context_window,
        "max_tokens": opts.max_tokens,
    })

    try:
        results = asyncio.run(run_eval(opts, lambda partial: write(partial, done=False)))
    except Exception as exc:  # e.g. no model configured for --settings
        sys.stderr.write(f"error: {exc}\n")
        return 2
    write(results, done=True)
    sys.stdout.write(format_table(results, label) + f"\n\nJSON: {out}\n")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
